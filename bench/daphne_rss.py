"""A daphne's memory over many turns: RSS stays flat once the context cache's byte cap
is reached (issue 20: "a daphne's RSS flat within the cache's byte cap over 10,000
turns").

One daphne on PostgreSQL + Redis (``--sqlite``: SQLite + the in-memory layer) per
byte cap (``--caps``, ``FORGE_CONTEXT_CACHE_BYTES``), the session cap raised above
``--sessions`` so that only bytes evict. ``--turns`` turns through
``POST /api/sessions/{id}/messages/?wait=1``, round robin over ``--sessions`` sessions,
``--clients`` at a time (each its own sessions), the model ``bench/clock`` asked for
``--deltas`` deltas at no delay (a reply of ~18 characters a delta). Prints a row every
tenth of the turns: the daphne's RSS (``VmRSS``), its growth since the first row's
start (after the sessions were made and warmed), and turns per second.

    python bench/daphne_rss.py [--turns 10000] [--sessions 500] [--clients 4]
        [--caps 4194304,67108864] [--deltas 80] [--sqlite]

Timings are not the point; nothing here is asserted by tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
from server_path import ROOT, database_url, manage, server_env
from serving import free_port, server_arguments, start_daphne, static_root, wait_until_up
from table import print_table  # bench/ comes first on sys.path: python bench/<name>.py


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def run(args: argparse.Namespace, base: str, pid: int, token: str) -> list[list[str]]:
    headers = {"Authorization": f"Token {token}"}
    text = f"{args.deltas} 1000000"
    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(
        base_url=base, headers=headers, timeout=120, limits=limits
    ) as http:
        ids: list[str] = []
        for n in range(args.sessions):
            response = await http.post("/api/sessions/", json={"title": f"rss {n}"})
            response.raise_for_status()
            ids.append(response.json()["id"])

        async def turn(session_id: str) -> None:
            response = await http.post(
                f"/api/sessions/{session_id}/messages/?wait=1", json={"text": text}
            )
            if response.status_code != 200:
                raise RuntimeError(f"{response.status_code} {response.text[:300]}")

        for session_id in ids[: args.clients * 2]:  # warm: imports, pools
            await turn(session_id)
        start_rss = rss_mib(pid)
        rows = []
        done = 0
        step = max(args.turns // 10, 1)
        queue: asyncio.Queue[str] = asyncio.Queue()
        for n in range(args.turns):
            queue.put_nowait(ids[n % len(ids)])
        started = time.monotonic()
        lock = asyncio.Lock()

        async def client() -> None:
            nonlocal done
            while not queue.empty():
                session_id = queue.get_nowait()
                await turn(session_id)
                async with lock:
                    done += 1
                    if done % step == 0:
                        rss = rss_mib(pid)
                        rows.append(
                            [
                                f"{args.cap / 2**20:g}",
                                f"{done:,}",
                                f"{rss:.1f}",
                                f"{rss - start_rss:.1f}",
                                f"{done / (time.monotonic() - started):.0f}",
                            ]
                        )

        await asyncio.gather(*(client() for _ in range(args.clients)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--caps", default=f"{4 * 2**20},{64 * 2**20}")
    parser.add_argument("--deltas", type=int, default=80)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--app-dir", type=Path, default=ROOT)
    server_arguments(parser)
    args = parser.parse_args()
    rows: list[list[str]] = []
    for cap in [int(c) for c in args.caps.split(",") if c]:
        args.cap = cap
        scratch = Path(tempfile.mkdtemp(prefix="forge-daphne-rss-"))
        env = static_root(server_env(args, database_url(args, scratch), scratch))
        env["FORGE_CONTEXT_CACHE_BYTES"] = str(cap)
        env["FORGE_CONTEXT_CACHE_SIZE"] = str(args.sessions * 2)
        env["FORGE_CONTEXT_CACHE_MESSAGES"] = str(10**9)
        manage(args, env, "migrate", "--noinput", "--verbosity", "0")
        manage(args, env, "collectstatic", "--noinput", "--verbosity", "0")
        token = manage(args, env, "create_user", "bench", "--tenant", "bench", "--token")
        token = token.strip().splitlines()[-1]
        port = free_port()
        log = scratch / "daphne.log"
        server = start_daphne(args.app_dir, env, port, log)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(base, server, log)
            rows += asyncio.run(run(args, base, server.pid, token))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
    engine = "SQLite + in-memory layer" if args.sqlite else "PostgreSQL + Redis"
    print(
        f"a daphne's RSS over {args.turns:,} turns through HTTP ?wait=1, {args.sessions} "
        f"sessions, {args.clients} clients, {args.deltas} deltas a reply; {engine}"
    )
    print_table(["cap MiB", "turns", "RSS MiB", "RSS growth MiB", "turns/s"], rows)


if __name__ == "__main__":
    main()
