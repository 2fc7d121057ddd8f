"""Fan-out through a real daphne with the Redis channel layer.

N WebSocket clients (default 50) watch one session while a reply streams
``--deltas`` text deltas at ``--rate`` per second (the ``bench/clock`` provider of
``fanout_plugin.py``: each delta carries the time it was produced). Every client
rebuilds the text from frames, refusing holes and repeats.

Prints, per rate: deltas per second delivered (all clients together), latency
from publish to receipt (p50, p99, max), frames the channel layer lost and the
server repaired (events from the log, parts by snapshot), and how many clients
ended with exactly the text the log holds.

    python bench/fanout.py [--clients 50] [--rates 200,1000] [--deltas 2000]
        [--redis-url redis://127.0.0.1:6379/0] [--database-url postgres://…/forge_bench_fanout]

Needs Redis; uses PostgreSQL when reachable (a scratch database), else SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import websockets
from serving import free_port, server_arguments, start_daphne, static_root, wait_until_up
from table import print_table  # bench/ comes first on sys.path: python bench/<name>.py

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "forge_bench_fanout"


def database_url(postgres: str) -> str:
    try:
        import psycopg

        with psycopg.connect(postgres, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
            admin.execute(f"CREATE DATABASE {BENCH_DB}")
        return postgres.rsplit("/", 1)[0] + f"/{BENCH_DB}"
    except Exception:
        return f"sqlite:///{tempfile.mkdtemp(prefix='forge-fanout-')}/fanout.sqlite3"


def server_env(db_url: str, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "DJANGO_"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
            "FORGE_DEBUG": "0",
            "DATABASE_URL": db_url,
            "REDIS_URL": redis_url,
            "FORGE_REDIS_PREFIX": f"fanout-{os.getpid()}",
            "FORGE_MODEL": "bench/clock",
            "FORGE_SMALL_MODEL": "offline/echo",
            "FORGE_PLUGINS": "fanout_plugin",
            "PYTHONPATH": f"{ROOT / 'bench'}:{ROOT}",
            "FORGE_RECOVER_ON_START": "0",
        }
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


class Client:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.parts: dict[str, str] = {}
        self.final = ""
        self.snapshots = 0
        self.holes = 0
        self.last_seq = 0

    def apply(self, frame: dict[str, Any], received: float) -> bool:
        """Take a frame; True once the reply is complete."""
        if frame["kind"] == "delta":
            have = self.parts.get(frame["part_id"], "")
            if frame["offset"] != len(have):
                self.holes += 1
            self.parts[frame["part_id"]] = have + frame["delta"]
            # A frame may carry several deltas (merged when they queued up): each is a time.
            self.latencies += [received - float(stamp) for stamp in frame["delta"].split()]
        elif frame["kind"] == "snapshot":
            self.snapshots += 1
            self.parts[frame["part_id"]] = frame["text"]
        elif frame["kind"] == "event":
            if frame["seq"] != self.last_seq + 1:
                self.holes += 1
            self.last_seq = frame["seq"]
            data = frame["data"]
            if (
                frame["type"] == "part.updated"
                and data["type"] == "text"
                and data["time"].get("end")
            ):
                self.final = data["text"]
                self.parts.setdefault(data["id"], "")
            if (
                frame["type"] == "message.updated"
                and data["role"] == "assistant"
                and data.get("completed_at")
            ):
                return True
        return False

    def text_matches(self) -> bool:
        return any(text.rstrip() == self.final for text in self.parts.values()) and bool(self.final)


async def watch(
    url: str, headers: dict[str, str], client: Client, ready: asyncio.Event, count: list[int]
) -> None:
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        # The pong comes once the server has subscribed this socket and sent its backlog.
        await ws.send(json.dumps({"type": "ping"}))
        while json.loads(await ws.recv())["kind"] != "pong":
            pass
        count[0] += 1
        if count[0] == count[1]:
            ready.set()
        while True:
            frame = json.loads(await ws.recv())
            if client.apply(frame, time.time()):
                return


async def run_rate(
    base: str, token: str, session_id: str, clients: int, rate: int, deltas: int
) -> dict[str, Any]:
    headers = {"Authorization": f"Token {token}", "Origin": base}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
        head = (await http.get(f"/api/sessions/{session_id}/messages/?limit=1")).json()["head_seq"]
        ws_url = base.replace("http", "ws") + f"/ws/sessions/{session_id}/?after={head}"
        watchers = [Client() for _ in range(clients)]
        for w in watchers:
            w.last_seq = head
        ready, count = asyncio.Event(), [0, clients]
        tasks = [asyncio.create_task(watch(ws_url, headers, w, ready, count)) for w in watchers]
        await asyncio.wait_for(ready.wait(), 30)
        started = time.monotonic()
        response = await http.post(
            f"/api/sessions/{session_id}/messages/", json={"text": f"{deltas} {rate}"}
        )
        response.raise_for_status()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=deltas / rate * 5 + 60)
        elapsed = time.monotonic() - started
    latencies = sorted(x for w in watchers for x in w.latencies)
    return {
        "clients": clients,
        "rate": rate,
        "deltas": deltas,
        "delivered_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "max_ms": latencies[-1] * 1000,
        "holes": sum(w.holes for w in watchers),
        "snapshots": sum(w.snapshots for w in watchers),
        "complete": sum(w.text_matches() for w in watchers),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rates", default="200,1000")
    parser.add_argument("--deltas", type=int, default=2000)
    server_arguments(parser)
    args = parser.parse_args()
    db_url = database_url(args.postgres_url)
    env = static_root(server_env(db_url, args.redis_url))
    manage(env, "migrate", "--noinput", "--verbosity", "0")
    manage(env, "collectstatic", "--noinput", "--verbosity", "0")
    token = (
        manage(env, "create_user", "bench", "--tenant", "bench", "--token").strip().splitlines()[-1]
    )
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="forge-fanout-log-")) / "daphne.log"
    server = start_daphne(ROOT, env, port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, server, log)
        session = httpx.post(
            base + "/api/sessions/",
            json={"title": "fanout"},
            headers={"Authorization": f"Token {token}"},
        ).json()["id"]
        rows = [
            asyncio.run(run_rate(base, token, session, args.clients, int(rate), args.deltas))
            for rate in args.rates.split(",")
        ]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
    repaired = re.findall(
        r"repaired (\d+) events from the log and (\d+) parts by snapshot", log.read_text()
    )
    events_repaired = sum(int(e) for e, _ in repaired)
    parts_repaired = sum(int(p) for _, p in repaired)
    engine = "PostgreSQL" if db_url.startswith("postgres") else "SQLite"
    print(
        f"fan-out through daphne + channels-redis ({engine}); {args.clients} WebSocket clients "
        f"on one session; {args.deltas} deltas per reply"
    )
    header = [
        "rate/s",
        "clients",
        "delivered/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "holes seen",
        "full text",
    ]
    table = [
        [
            str(r["rate"]),
            str(r["clients"]),
            f"{r['delivered_per_s']:,.0f}",
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            f"{r['max_ms']:.1f}",
            str(r["holes"]),
            f"{r['complete']}/{r['clients']}",
        ]
        for r in rows
    ]
    print_table(header, table)
    print(
        f"frames lost by the channel layer and repaired by the server: {events_repaired} events "
        f"(from the log), {parts_repaired} parts (by snapshot); snapshots clients received: "
        f"{sum(r['snapshots'] for r in rows)}"
    )


if __name__ == "__main__":
    main()
