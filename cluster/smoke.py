"""A chat through the cluster's nginx: ``python cluster/smoke.py TOKEN [URL]``.

Creates a session, opens its WebSocket and its SSE stream through nginx, sends a prompt
(to whichever daphne nginx picks), and checks both streams carry the reply to its end
and the history page (a replica read) has it. Prints what it saw; exits 1 on a miss.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
import websockets


async def main(token: str, url: str) -> int:
    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        session = (await client.post("/api/sessions/", json={"title": "smoke"})).json()
        sid = session["id"]
        ws_url = url.replace("http", "ws", 1).rstrip("/") + f"/ws/sessions/{sid}/?after=0"
        ws_frames: list[dict] = []
        sse_lines: list[str] = []

        async def read_ws() -> None:
            origin = {"Origin": url.rstrip("/")}
            async with websockets.connect(ws_url, additional_headers={**headers, **origin}) as ws:
                async for raw in ws:
                    frame = json.loads(raw)
                    ws_frames.append(frame)
                    if _finished(frame):
                        return

        async def read_sse() -> None:
            async with client.stream("GET", f"/api/sessions/{sid}/stream/?after=0") as stream:
                async for line in stream.aiter_lines():
                    sse_lines.append(line)
                    if line.startswith("data:") and _finished(json.loads(line[5:])):
                        return

        tasks = [asyncio.create_task(read_ws()), asyncio.create_task(read_sse())]
        await asyncio.sleep(0.5)
        prompt = await client.post(f"/api/sessions/{sid}/messages/", json={"text": "hello there"})
        print("prompt:", prompt.status_code, prompt.json().get("assistant_message_id"))
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        await asyncio.sleep(1)  # the replica replays
        page = (await client.get(f"/api/sessions/{sid}/messages/")).json()
        texts = [p.get("text") for m in page["results"] for p in m["parts"] if p["type"] == "text"]
        print(f"websocket frames: {len(ws_frames)}; sse lines: {len(sse_lines)}")
        print("history page:", texts, "head_seq", page["head_seq"])
        return 0 if len(texts) == 2 and ws_frames and sse_lines else 1


def _finished(frame: dict) -> bool:
    data = frame.get("data") or {}
    info = data.get("info", data)
    return (
        frame.get("type") == "message.updated"
        and info.get("role") == "assistant"
        and bool(info.get("completed_at"))
    )


if __name__ == "__main__":
    sys.exit(
        asyncio.run(
            main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "http://127.0.0.1:8080")
        )
    )
