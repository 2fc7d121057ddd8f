"""Concurrent streams: S sessions each streaming one reply through two daphne processes.

Two daphne processes on PostgreSQL + Redis; S sessions, each with one WebSocket
client (spread across both processes), all start a reply at once. The model is
``bench/clock`` (``fanout_plugin.py``, loaded with ``FORGE_PLUGINS`` from this
folder, so it works with any checkout): ``--deltas`` text deltas at ``--rate``
per second (ideal reply time: deltas / rate), each delta the UNIX time it was
produced, so every client also measures each delta's latency.

Every client rebuilds its reply from the frames it receives (offsets checked,
snapshots applied) and checks it is whole (every delta, in order) and equal to
the finished part in its ``part.updated`` event and to the part stored
(read back over HTTP after the run).

Prints, per S: first delta p50 / p99 (from sending the prompt), reply done
p50 / p99 (to the ``message.updated`` that completes it), delta latency p50 /
p99 (produced to received), deltas per second relayed (all clients), the
daphne processes' CPU seconds during the run (from /proc), server CPU µs per
delta, and how many replies were whole.

    python bench/concurrency.py [--sessions 25,50,100,200] [--deltas 100] [--rate 50]
        [--app-dir PATH] [--window-ms 40] [--layer pubsub|core]
        [--redis-url redis://127.0.0.1:6379/0] [--postgres-url postgres://…/postgres]
        [--cluster [--daphnes 3]]

``--cluster`` runs the same clients against a cluster of its own (cluster/cluster.py:
nginx in front of ``--daphnes`` daphnes, two Redis shards, a PostgreSQL primary and
replica, in a temporary directory on free ports), every client through nginx's one
entry, so the table compares N daphnes behind nginx with two daphnes direct.

``--app-dir`` runs the daphne processes (and migrations) from another checkout,
e.g. ``git worktree add /work/before <commit>`` to measure the code before a
change with the same clients; ``--window-ms`` and ``--layer`` set
``FORGE_DELTA_WINDOW_MS`` and ``FORGE_CHANNEL_LAYER`` (code that predates them
ignores them).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets
from serving import free_port, free_run, server_arguments, start_daphne, static_root, wait_until_up
from table import print_table  # bench/ comes first on sys.path: python bench/<name>.py

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BENCH_DB = "forge_bench_concurrency"
TICKS = os.sysconf("SC_CLK_TCK")


def fresh_database(postgres: str) -> str:
    import psycopg

    with psycopg.connect(postgres, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DB}")
    return postgres.rsplit("/", 1)[0] + f"/{BENCH_DB}"


def server_env(args: argparse.Namespace, db_url: str, app_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "DJANGO_"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
            "FORGE_DEBUG": "0",
            "DATABASE_URL": db_url,
            "REDIS_URL": args.redis_url,
            "FORGE_REDIS_PREFIX": f"concurrency-{os.getpid()}",
            "FORGE_MODEL": "bench/clock",
            "FORGE_SMALL_MODEL": "offline/echo",
            "FORGE_PLUGINS": "fanout_plugin",
            "PYTHONPATH": f"{BENCH}:{app_dir}",
            "FORGE_RECOVER_ON_START": "0",
            "FORGE_MAX_STREAMS_PER_USER": "100000",
            "FORGE_PROMPT_RATE": "1000000/min",
            "FORGE_API_RATE": "1000000/min",
            "FORGE_LEASE_SECONDS": "60",
        }
    )
    for setting in args.server_env:
        key, _, value = setting.partition("=")
        env[key] = value
    if args.window_ms is not None:
        env["FORGE_DELTA_WINDOW_MS"] = str(args.window_ms)
    if args.layer is not None:
        env["FORGE_CHANNEL_LAYER"] = args.layer
    return env


def manage(app_dir: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class Client:
    url: str
    session_id: str
    deltas: int
    sent_at: float = 0.0
    first_delta: float | None = None
    done: float | None = None
    text: dict[str, str] = field(default_factory=dict)
    final: str | None = None
    latencies: list[float] = field(default_factory=list)
    holes: int = 0
    snapshots: int = 0
    frames: int = 0
    error: str | None = None

    def apply(self, frame: dict[str, Any], now: float, wall: float) -> bool:
        """Take a frame; True once the reply is complete."""
        kind = frame.get("kind")
        if kind == "delta":
            self.frames += 1
            if self.first_delta is None:
                self.first_delta = now - self.sent_at
            have = self.text.get(frame["part_id"], "")
            if frame["offset"] != len(have):
                self.holes += 1
                have = have[: frame["offset"]]
            self.text[frame["part_id"]] = have + frame["delta"]
            self.latencies += [wall - float(stamp) for stamp in frame["delta"].split()]
        elif kind == "snapshot":
            self.snapshots += 1
            self.text[frame["part_id"]] = frame["text"]
        elif kind == "event":
            data = frame["data"]
            if (
                frame["type"] == "part.updated"
                and data.get("type") == "text"
                and data.get("time", {}).get("end")
            ):
                self.final = data["text"]
            if (
                frame["type"] == "message.updated"
                and data.get("role") == "assistant"
                and data.get("completed_at")
            ):
                self.done = now - self.sent_at
                return True
        elif kind == "error":
            self.error = f"{frame.get('code')}: {frame.get('message')}"
            return True
        return False

    def whole(self) -> bool:
        return self.why_not_whole(self.final) is None

    def why_not_whole(self, stored: str | None) -> str | None:
        """None when the streamed text, the finished part's and the stored one are one and
        the same whole reply; else what differs."""
        if self.error or self.final is None:
            return self.error or "no finished text part"
        if len(self.final.split()) != self.deltas:
            return f"the finished part has {len(self.final.split())} deltas"
        if not any(t.rstrip() == self.final for t in self.text.values()):
            got = max((len(t.rstrip()) for t in self.text.values()), default=0)
            return f"streamed {got} of {len(self.final)} characters"
        if stored != self.final:
            return "the stored part differs"
        return None


async def run_client(
    client: Client, headers: dict[str, str], ready: asyncio.Barrier, go: asyncio.Event, text: str
) -> None:
    async with websockets.connect(
        client.url, additional_headers=headers, max_size=None, open_timeout=60
    ) as ws:
        await ws.send(json.dumps({"type": "ping"}))
        while json.loads(await ws.recv())["kind"] != "pong":
            pass  # the backlog (the session's creation)
        await ready.wait()
        await go.wait()
        client.sent_at = time.monotonic()
        await ws.send(json.dumps({"type": "prompt", "text": text, "client_id": "bench"}))
        while True:
            frame = json.loads(await ws.recv())
            if client.apply(frame, time.monotonic(), time.time()):
                return


async def stored_text(http: httpx.AsyncClient, session_id: str) -> str | None:
    page = (await http.get(f"/api/sessions/{session_id}/messages/?limit=10")).json()
    for item in reversed(page["results"]):
        if item["info"]["role"] == "assistant":
            return next((p["text"] for p in item["parts"] if p["type"] == "text"), None)
    return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


async def run_size(
    bases: list[str],
    pids: list[int],
    token: str,
    sessions: int,
    deltas: int,
    rate: int,
    profile: tuple[str, Path, float | None] | None = None,
) -> dict[str, Any]:
    headers = {"Authorization": f"Token {token}", "Origin": bases[0]}
    limits = httpx.Limits(max_connections=20)
    https = [
        httpx.AsyncClient(base_url=b, headers=headers, timeout=120, limits=limits) for b in bases
    ]
    try:
        ids = []
        for n in range(sessions):
            http = https[n % len(https)]
            response = await http.post("/api/sessions/", json={"title": f"bench {n}"})
            response.raise_for_status()
            ids.append(response.json()["id"])
        clients = [
            Client(
                url=bases[n % len(bases)].replace("http", "ws") + f"/ws/sessions/{sid}/?after=0",
                session_id=sid,
                deltas=deltas,
            )
            for n, sid in enumerate(ids)
        ]
        ready = asyncio.Barrier(sessions + 1)
        go = asyncio.Event()
        tasks = [
            asyncio.create_task(
                run_client(
                    c, {**headers, "Origin": bases[n % len(bases)]}, ready, go, f"{deltas} {rate}"
                )
            )
            for n, c in enumerate(clients)
        ]
        await asyncio.wait_for(ready.wait(), 120)
        await asyncio.sleep(0.5)  # let the servers settle after the connections
        cpu_before = sum(cpu_seconds(p) for p in pids)
        client_cpu = time.process_time()
        started = time.monotonic()
        spies = []
        if profile is not None:  # py-spy on each server while the replies stream
            spy, folder, seconds = profile
            spies = [
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(pid),
                        "--duration",
                        str(max(1, round(seconds if seconds else deltas / rate * 2))),
                        "--rate",
                        "250",
                        "--format",
                        "raw",
                        "--nonblocking",
                        "--gil",  # only the thread holding the GIL: idle threads do not count
                        "-o",
                        str(folder / f"profile-{sessions}-{pid}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for pid in pids
            ]
        go.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=deltas / rate * 20 + 120)
        elapsed = time.monotonic() - started
        cpu = sum(cpu_seconds(p) for p in pids) - cpu_before
        client_cpu = time.process_time() - client_cpu
        for spy_process in spies:
            spy_process.wait(60)
        await asyncio.sleep(1.0)  # a cluster's history pages read its replica: let it replay
        stored = await asyncio.gather(
            *(stored_text(https[n % len(https)], c.session_id) for n, c in enumerate(clients))
        )
    finally:
        for http in https:
            await http.aclose()
    why = [c.why_not_whole(s) for c, s in zip(clients, stored, strict=True)]
    whole = why.count(None)
    firsts = [c.first_delta for c in clients if c.first_delta is not None]
    dones = [c.done for c in clients if c.done is not None]
    latencies = [x for c in clients for x in c.latencies]
    relayed = len(latencies)
    return {
        "sessions": sessions,
        "first_p50": percentile(firsts, 0.5),
        "first_p99": percentile(firsts, 0.99),
        "done_p50": percentile(dones, 0.5),
        "done_p99": percentile(dones, 0.99),
        "lat_p50": statistics.median(latencies),
        "lat_p99": percentile(latencies, 0.99),
        "relayed_per_s": relayed / elapsed,
        "frames": sum(c.frames for c in clients),
        "cpu": cpu,
        "cpu_us_per_delta": cpu / max(relayed, 1) * 1e6,
        "client_cpu": client_cpu,
        "holes": sum(c.holes for c in clients),
        "snapshots": sum(c.snapshots for c in clients),
        "whole": whole,
        "errors": sorted({c.error for c in clients if c.error}),
        "not_whole": sorted({w for w in why if w is not None}),
    }


def run_direct(
    args: argparse.Namespace, app_dir: Path
) -> tuple[list[dict[str, Any]], dict[str, str], Path]:
    """Two daphnes on the machine's PostgreSQL and Redis, each client straight to one."""
    db_url = fresh_database(args.postgres_url)
    env = static_root(server_env(args, db_url, app_dir))
    manage(app_dir, env, "migrate", "--noinput", "--verbosity", "0")
    manage(app_dir, env, "collectstatic", "--noinput", "--verbosity", "0")
    token = (
        manage(app_dir, env, "create_user", "bench", "--tenant", "bench", "--token")
        .strip()
        .splitlines()[-1]
    )
    logs = Path(tempfile.mkdtemp(prefix="forge-concurrency-"))
    ports = [free_port(), free_port()]
    servers = [
        start_daphne(app_dir, env, port, logs / f"daphne-{n}.log") for n, port in enumerate(ports)
    ]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    rows = []
    try:
        for n, (base, server) in enumerate(zip(bases, servers, strict=True)):
            wait_until_up(base, server, logs / f"daphne-{n}.log")
        pids = [s.pid for s in servers]
        for size in [int(s) for s in args.sessions.split(",")]:
            profile = (args.py_spy, logs, args.py_spy_seconds) if args.py_spy else None
            rows.append(
                asyncio.run(run_size(bases, pids, token, size, args.deltas, args.rate, profile))
            )
            time.sleep(1.0)
    finally:
        for server in servers:
            os.killpg(server.pid, signal.SIGTERM)
        for server in servers:
            server.wait(10)
    return rows, env, logs


def run_on_cluster(
    args: argparse.Namespace, app_dir: Path
) -> tuple[list[dict[str, Any]], dict[str, str], Path, str]:
    """A cluster of its own (cluster/cluster.py), every client through its nginx."""
    sys.path.insert(0, str(app_dir))
    directory = Path(tempfile.mkdtemp(prefix="forge-concurrency-cluster-"))
    directory.chmod(0o755)  # nginx's workers and PostgreSQL's user reach inside
    ports = [free_port() for _ in range(args.daphnes + 4)]
    env = server_env(args, "", app_dir)
    # The cluster's own database, Redis and DEBUG (its demo login needs DEBUG on).
    for key in ("DATABASE_URL", "REDIS_URL", "FORGE_DEBUG"):
        env.pop(key)
    os.environ.update(env)
    os.environ.update(
        CLUSTER_DIR=str(directory),
        CLUSTER_PORT=str(ports[0]),
        CLUSTER_DAPHNES=str(args.daphnes),
        CLUSTER_DAPHNE_PORT=str(free_run(args.daphnes)),
        CLUSTER_REDIS_PORT=str(free_run(2)),
        CLUSTER_PG_PORT=str(free_run(2)),
    )
    from cluster import cluster  # reads CLUSTER_DIR when imported

    config = cluster.Config.from_env()
    rows = []
    try:
        cluster.up(config)
        out = cluster.manage(config, "create_user", "bench", "--tenant", "bench", "--token")
        token = out.strip().splitlines()[-1]
        pids = [cluster.running(name) for name in cluster.daphne_names(config)]
        assert all(pids), pids
        base = config.url.rstrip("/")
        for size in [int(s) for s in args.sessions.split(",")]:
            daphnes = [int(p) for p in pids if p]
            rows.append(asyncio.run(run_size([base], daphnes, token, size, args.deltas, args.rate)))
            time.sleep(1.0)
    finally:
        cluster.down(config)
    label = f"nginx → {args.daphnes} daphnes (cluster: 2 Redis shards, PostgreSQL + replica)"
    return rows, env, directory / "logs", label


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", default="25,50,100,200")
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--app-dir", type=Path, default=ROOT)
    parser.add_argument("--window-ms", type=int, default=None)
    parser.add_argument("--layer", choices=["pubsub", "core"], default=None)
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for the servers, e.g. FORGE_DB_POOL=8 (repeatable)",
    )
    parser.add_argument(
        "--cluster", action="store_true", help="through a cluster's nginx (cluster/cluster.py)"
    )
    parser.add_argument("--daphnes", type=int, default=3, help="the cluster's daphnes")
    parser.add_argument(
        "--py-spy", help="the py-spy executable: record each server while replies stream"
    )
    parser.add_argument(
        "--py-spy-seconds",
        type=float,
        help="how long py-spy records from the prompts (default: twice a reply's time); "
        "1 records the turns' start",
    )
    server_arguments(parser)
    args = parser.parse_args()
    app_dir = args.app_dir.resolve()
    if args.cluster:
        rows, env, logs, servers_label = run_on_cluster(args, app_dir)
    else:
        rows, env, logs = run_direct(args, app_dir)
        servers_label = "2 daphne processes, PostgreSQL + Redis"
    ideal = args.deltas / args.rate
    label = subprocess.run(
        ["git", "-C", str(app_dir), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"concurrent streams: {servers_label}, {args.deltas} deltas at "
        f"{args.rate}/s per reply (ideal {ideal:.1f} s); app: {app_dir} ({label}); "
        f"window {env.get('FORGE_DELTA_WINDOW_MS', 'default')} ms, "
        f"layer {env.get('FORGE_CHANNEL_LAYER', 'default')}"
    )
    header = [
        "S",
        "first delta p50 / p99 s",
        "done p50 / p99 s",
        "delta latency p50 / p99 ms",
        "deltas/s relayed",
        "frames",
        "server CPU s",
        "CPU µs/delta",
        "client CPU s",
        "whole",
    ]
    table = [
        [
            str(r["sessions"]),
            f"{r['first_p50']:.2f} / {r['first_p99']:.2f}",
            f"{r['done_p50']:.2f} / {r['done_p99']:.2f}",
            f"{r['lat_p50'] * 1000:.0f} / {r['lat_p99'] * 1000:.0f}",
            f"{r['relayed_per_s']:,.0f}",
            str(r["frames"]),
            f"{r['cpu']:.1f}",
            f"{r['cpu_us_per_delta']:,.0f}",
            f"{r['client_cpu']:.1f}",
            f"{r['whole']}/{r['sessions']}",
        ]
        for r in rows
    ]
    print_table(header, table)
    for r in rows:
        if r["holes"] or r["snapshots"] or r["errors"] or r["not_whole"]:
            print(
                f"S={r['sessions']}: {r['holes']} offset holes, {r['snapshots']} snapshots, "
                f"errors: {r['errors']}, not whole: {r['not_whole']}"
            )
    print(f"server logs: {logs}")


if __name__ == "__main__":
    main()
