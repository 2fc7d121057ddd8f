"""A turn through the server against the same turn in process (issue 20, item 4).

One daphne on PostgreSQL + Redis (``--sqlite``: SQLite + the in-memory layer), the
model ``bench/clock`` (``fanout_plugin.py``) asked for ``--deltas`` deltas at no
delay, S sessions with titles (so no title task runs beside the turns), turns one at
a time, round robin over the sessions. Each face runs ``--turns`` turns a round,
faces interleaved over ``--rounds`` rounds (the machine drifts):

* ``in-process``: ``forge.runtime.start_turn`` to the end of its task, in a process of
  its own with the server's settings (what ``bench/peers`` calls a whole turn);
* ``http``: ``POST /api/sessions/{id}/messages/?wait=1`` to its ``200``;
* ``socket``: a ``prompt`` frame on the session's open WebSocket to the assistant
  ``message.updated`` that completes it;
* ``aisdk``: ``POST /api/chat`` (the AI SDK's ``useChat`` body) read to its ``[DONE]``.

Prints, per face: client wall ms per turn (p50 / p90), the serving process's CPU ms
per turn (user + system from /proc over the face's turns: the path's whole cost on
the server, the turn included), and both as a ratio to the in-process turn. The
issue's aim: an HTTP or socket turn at most 2x the in-process turn.

    python bench/server_path.py [--turns 100] [--rounds 3] [--sessions 10] [--deltas 80]
        [--faces in-process,http,socket,aisdk] [--sqlite] [--py-spy FILE.svg|FILE.txt --face http]
        [--redis-url …] [--postgres-url …/postgres] [--app-dir PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import websockets
from serving import free_port, server_arguments, start_daphne, static_root, wait_until_up
from table import print_table  # bench/ comes first on sys.path: python bench/<name>.py

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BENCH_DB = "forge_bench_server_path"
TICKS = os.sysconf("SC_CLK_TCK")
FACES = ("in-process", "http", "socket", "aisdk")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


def database_url(args: argparse.Namespace, scratch: Path, name: str = BENCH_DB) -> str:
    """SQLite in ``scratch`` (``--sqlite``), else the PostgreSQL database ``name``, made
    anew (a bench that runs beside this one passes a name of its own)."""
    if args.sqlite:
        return f"sqlite:///{scratch / 'forge.sqlite3'}"
    import psycopg

    with psycopg.connect(args.postgres_url, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    return args.postgres_url.rsplit("/", 1)[0] + f"/{name}"


def drop_database(args: argparse.Namespace, name: str = BENCH_DB) -> None:
    """Drop what :func:`database_url` made (nothing for ``--sqlite``)."""
    if args.sqlite:
        return
    import psycopg

    with psycopg.connect(args.postgres_url, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def server_env(args: argparse.Namespace, db_url: str, scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "DJANGO_"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
            "FORGE_DEBUG": "0",
            "DATABASE_URL": db_url,
            "FORGE_MODEL": "bench/clock",
            "FORGE_SMALL_MODEL": "offline/echo",
            "FORGE_PLUGINS": "fanout_plugin",
            "PYTHONPATH": f"{BENCH}:{args.app_dir}",
            "FORGE_RECOVER_ON_START": "0",
            "FORGE_PROMPT_RATE": "1000000/min",
            "FORGE_API_RATE": "1000000/min",
            "FORGE_WORKSPACE_ROOT": str(scratch / "workspaces"),
        }
    )
    if args.sqlite:
        env.pop("REDIS_URL", None)
    else:
        env["REDIS_URL"] = args.redis_url
        env["FORGE_REDIS_PREFIX"] = f"server-path-{os.getpid()}"
    return env


def manage(args: argparse.Namespace, env: dict[str, str], *command: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *command],
        cwd=args.app_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


# --- the in-process turn: a child process with the server's settings -----------------

IN_PROCESS = """
import asyncio, json, os, sys, time
import django
django.setup()
from channels.db import database_sync_to_async
from forge.runtime import start_turn
from sessions.models import Session

ids, turns, text = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

async def main():
    sessions = [await database_sync_to_async(Session.objects.get)(pk=i) for i in ids]
    for session in sessions:  # warm: imports, the pool, the context cache
        await (await start_turn(session=session, text=text)).task
    walls = []
    cpu = time.process_time()
    for n in range(turns):
        started = time.perf_counter()
        turn = await start_turn(session=sessions[n % len(sessions)], text=text)
        await turn.task
        walls.append(time.perf_counter() - started)
    print(json.dumps({"walls": walls, "cpu": time.process_time() - cpu}))

asyncio.run(main())
"""


def run_in_process(
    args: argparse.Namespace, env: dict[str, str], ids: list[str], text: str
) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, json.dumps(ids), str(args.turns), text],
        cwd=args.app_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {"walls": result["walls"], "cpu": result["cpu"]}


# --- the faces through the server ------------------------------------------------------


async def http_turns(http: httpx.AsyncClient, ids: list[str], turns: int, text: str) -> list[float]:
    walls = []
    for n in range(turns):
        started = time.perf_counter()
        response = await http.post(
            f"/api/sessions/{ids[n % len(ids)]}/messages/?wait=1", json={"text": text}
        )
        walls.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"http turn: {response.status_code} {response.text[:300]}")
    return walls


async def socket_turns(sockets: list[Any], turns: int, text: str) -> list[float]:
    walls = []
    for n in range(turns):
        ws = sockets[n % len(sockets)]
        started = time.perf_counter()
        await ws.send(json.dumps({"type": "prompt", "text": text, "client_id": str(n)}))
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("kind") == "error":
                raise RuntimeError(f"socket turn: {frame}")
            data = frame.get("data") or {}
            if (
                frame.get("kind") == "event"
                and frame.get("type") == "message.updated"
                and data.get("role") == "assistant"
                and data.get("completed_at")
            ):
                break
        walls.append(time.perf_counter() - started)
    return walls


async def aisdk_turns(
    http: httpx.AsyncClient, chats: list[str], turns: int, text: str
) -> list[float]:
    walls = []
    for n in range(turns):
        body = {
            "id": chats[n % len(chats)],
            "trigger": "submit-message",
            "messages": [
                {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}
            ],
        }
        started = time.perf_counter()
        async with http.stream("POST", "/api/chat", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"aisdk turn: {response.status_code} {response.text[:300]}")
            done = False
            async for line in response.aiter_lines():
                if line.strip() == "data: [DONE]":
                    done = True
        walls.append(time.perf_counter() - started)
        if not done:
            raise RuntimeError("aisdk turn: the stream ended without [DONE]")
    return walls


async def drain(ws: Any) -> None:
    """Read a socket's backlog up to the answer to a ping."""
    await ws.send(json.dumps({"type": "ping"}))
    while json.loads(await ws.recv())["kind"] != "pong":
        pass


def py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("py-spy")),
            # --gil: only the thread holding the GIL, so idle threads do not count.
            *("record", "--pid", str(pid), "--output", str(output), "--rate", "250", "--gil"),
            # FILE.txt: collapsed stacks (a line a stack and its count); else a flame graph.
            *(("--format", "raw") if output.suffix == ".txt" else ()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def run_server_faces(
    args: argparse.Namespace,
    base: str,
    pid: int,
    token: str,
    faces: list[str],
    text: str,
    in_process: Any,
) -> dict[str, dict[str, list[float]]]:
    headers = {"Authorization": f"Token {token}", "Origin": base}
    results: dict[str, dict[str, list[float]]] = {f: {"walls": [], "cpu": []} for f in faces}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120) as http:
        ids = []
        for n in range(args.sessions):
            response = await http.post("/api/sessions/", json={"title": f"bench {n}"})
            response.raise_for_status()
            ids.append(response.json()["id"])
        chats = [f"bench-chat-{uuid.uuid4().hex[:12]}-{n}" for n in range(args.sessions)]
        ws_base = base.replace("http://", "ws://")

        async def open_sockets() -> list[Any]:
            """A socket on each session, its backlog read. Open only while the socket face
            runs: a socket watching a session costs its process every frame of every
            turn, which would be charged to the other faces."""
            sockets = [
                await websockets.connect(
                    f"{ws_base}/ws/sessions/{i}/?after=0",
                    additional_headers=headers,
                    max_size=None,
                )
                for i in ids
            ]
            for ws in sockets:
                await drain(ws)
            return sockets

        # Warm every face: imports, pools, the context cache, the chats' sessions.
        await http_turns(http, ids, len(ids), text)
        await aisdk_turns(http, chats, len(chats), text)
        sockets = await open_sockets()
        await socket_turns(sockets, len(sockets), text)
        for ws in sockets:
            await ws.close()
        spy = None
        for round_ in range(args.rounds):
            for face in faces:
                if face == "in-process":
                    outcome = await asyncio.to_thread(in_process, ids)
                    results[face]["walls"] += outcome["walls"]
                    results[face]["cpu"].append(outcome["cpu"])
                    continue
                sockets = await open_sockets() if face == "socket" else []
                if args.py_spy and face == args.face and round_ == args.rounds - 1:
                    spy = py_spy(pid, args.py_spy)
                    await asyncio.sleep(1.0)
                cpu = cpu_seconds(pid)
                if face == "http":
                    walls = await http_turns(http, ids, args.turns, text)
                elif face == "socket":
                    walls = await socket_turns(sockets, args.turns, text)
                else:
                    walls = await aisdk_turns(http, chats, args.turns, text)
                results[face]["cpu"].append(cpu_seconds(pid) - cpu)
                results[face]["walls"] += walls
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(60)
                    spy = None
                for ws in sockets:
                    await ws.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=100, help="turns per face and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--deltas", type=int, default=80)
    parser.add_argument("--faces", default=",".join(FACES))
    parser.add_argument("--sqlite", action="store_true", help="SQLite + the in-memory layer")
    parser.add_argument("--app-dir", type=Path, default=ROOT)
    parser.add_argument("--py-spy", type=Path, default=None, help="a flame graph of --face")
    parser.add_argument("--face", default="http", help="the face --py-spy records")
    server_arguments(parser)
    args = parser.parse_args()
    faces = [f for f in args.faces.split(",") if f]
    unknown = set(faces) - set(FACES)
    if unknown:
        parser.error(f"unknown faces: {', '.join(sorted(unknown))}")
    scratch = Path(tempfile.mkdtemp(prefix="forge-server-path-"))
    db_url = database_url(args, scratch)
    env = static_root(server_env(args, db_url, scratch))
    manage(args, env, "migrate", "--noinput", "--verbosity", "0")
    manage(args, env, "collectstatic", "--noinput", "--verbosity", "0")
    token = manage(args, env, "create_user", "bench", "--tenant", "bench", "--token")
    token = token.strip().splitlines()[-1]
    port = free_port()
    log = scratch / "daphne.log"
    server = start_daphne(args.app_dir, env, port, log)
    base = f"http://127.0.0.1:{port}"
    text = f"{args.deltas} 1000000"  # bench/clock: this many deltas, no delay
    try:
        wait_until_up(base, server, log)
        results = asyncio.run(
            run_server_faces(
                args,
                base,
                server.pid,
                token,
                faces,
                text,
                lambda ids: run_in_process(args, env, ids, text),
            )
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)

    def per_turn(face: str) -> tuple[float, float, float]:
        walls = results[face]["walls"]
        cpu = sum(results[face]["cpu"]) / max(len(walls), 1)
        return percentile(walls, 0.5) * 1e3, percentile(walls, 0.9) * 1e3, cpu * 1e3

    base_wall = base_cpu = None
    if "in-process" in results:
        base_wall, _, base_cpu = per_turn("in-process")
    header = [
        "face",
        "turns",
        "wall p50 / p90 ms",
        "server CPU ms/turn",
        "wall / in-process",
        "CPU / in-process",
    ]
    rows = []
    for face in faces:
        p50, p90, cpu = per_turn(face)
        rows.append(
            [
                face,
                str(len(results[face]["walls"])),
                f"{p50:.1f} / {p90:.1f}",
                f"{cpu:.1f}",
                f"{p50 / base_wall:.2f}x" if base_wall else "",
                f"{cpu / base_cpu:.2f}x" if base_cpu else "",
            ]
        )
    engine = "SQLite + in-memory layer" if args.sqlite else "PostgreSQL + Redis"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"a turn through the server vs in process: one daphne, {engine}, {args.deltas} deltas "
        f"at no delay, {args.sessions} sessions, {args.turns} turns x {args.rounds} rounds per "
        f"face, interleaved; load average {load}"
    )
    print_table(header, rows)
    spread = {f: statistics.pstdev(results[f]["walls"]) * 1e3 for f in faces}
    print("wall stdev ms: " + ", ".join(f"{f} {v:.1f}" for f, v in spread.items()))


if __name__ == "__main__":
    main()
