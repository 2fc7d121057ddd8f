"""A chaos soak of the cluster (``make cluster``): S sessions chat through nginx for a
set time while daphnes are killed, Redis shards restarted and PostgreSQL stalled.

    python bench/soak.py [--duration 600 | --short] [--sessions 8] [--words 40]
        [--fault-every 30] [--existing] [--lease 8] [--keep]

Without ``--existing`` it starts a cluster of its own (cluster/cluster.py) in a
temporary ``CLUSTER_DIR`` on free loopback ports, with ``FORGE_LEASE_SECONDS=--lease``,
and stops it at the end. With ``--existing`` it uses the running cluster that the
``CLUSTER_*`` variables name (those of ``make cluster``, by default); a daphne it
restarts gets this process's environment plus the cluster's own (cluster.py
``Config.app_env``), so run it with the environment the cluster was started with.

Each session is its own user (the per-user prompt throttle and stream cap hold as
configured) with one session, a WebSocket client and an SSE client, both through nginx,
so least-connections spreads them over the daphnes. A session prompts over HTTP (also
through nginx), ``--words`` words for the offline echo model (``FORGE_MODEL``'s default,
``offline/echo``, streaming a word every ``FORGE_ECHO_DELAY`` s), waits for the reply to
end on its WebSocket, pauses, prompts again. A client whose stream drops reconnects
after the last ``seq`` it holds (``?after=`` on both faces); a durable frame that is not
the next ``seq`` of its connection is counted (a duplicate, or a gap: out of order) and
the client resyncs.

Faults, in turn, every ``--fault-every`` seconds (the last one ends at least 20 s
before the end): ``kill -9`` of a daphne then its restart; a restart of one Redis
shard (empty, as a real restart); ``pg_ctl stop`` then ``start`` of the replica;
SIGSTOP of the primary and its processes for 3 s, then SIGCONT. Only the cluster's
own processes, by their pid files; only 127.0.0.1. Every loop is bounded in count
and time: prompts end at the deadline, reconnects back off, waits time out.

Prints a row per minute: turns done, first delta and reply end p50 / p99 (from
sending the prompt), errors by kind. At the end, after waiting the lease plus a
margin, the must-be-zeros: events lost (a ``seq`` a client was told of that is not
in the log with the same id, or an accepted or completed reply missing from the
log), replies left open, duplicate and out-of-order frames, and
``manage.py rebuild_projections --check`` over every session. Exits 1 when any is not
zero (or the check is not clean), 2 when it could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets
from serving import free_run
from table import print_table  # bench/ comes first on sys.path: python bench/<name>.py

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SHORT_SECONDS = 90
MARGIN = 10.0  # seconds past the lease a dead turn may take to be finalized


def own_cluster_env(daphnes: int, lease: float) -> dict[str, str]:
    """The ``CLUSTER_*`` variables of a cluster of the soak's own: a temp dir, free ports."""
    directory = Path(tempfile.mkdtemp(prefix="forge-soak-"))
    directory.chmod(0o755)  # nginx's workers and PostgreSQL's user must reach inside
    return {
        "CLUSTER_DIR": str(directory),
        "CLUSTER_PORT": str(free_run(1)),
        "CLUSTER_DAPHNES": str(daphnes),
        "CLUSTER_DAPHNE_PORT": str(free_run(daphnes)),
        "CLUSTER_REDIS_PORT": str(free_run(2)),
        "CLUSTER_PG_PORT": str(free_run(2)),
        "FORGE_LEASE_SECONDS": str(lease),
        "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
    }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


# --- what every client saw ----------------------------------------------------------


@dataclass
class Face:
    """One stream of a session (its WebSocket or its SSE), across its reconnections."""

    name: str
    last_seq: int = 0
    seen: dict[int, str] = field(default_factory=dict)  # seq → event id, every one told
    duplicates: int = 0
    out_of_order: int = 0
    delta_duplicates: int = 0
    delta_holes: int = 0  # ephemeral deltas missed (a snapshot or the part's end mends)
    connects: int = 0
    text: dict[str, str] = field(default_factory=dict)  # this connection's parts

    def take(self, frame: dict[str, Any], session: SoakSession, now: float) -> bool:
        """Take one frame; False when the connection must resync (a gap)."""
        kind = frame.get("kind")
        if kind == "event":
            seq = int(frame["seq"])
            if seq <= self.last_seq:
                self.duplicates += 1
                return True
            if seq != self.last_seq + 1:
                self.out_of_order += 1
                return False
            self.last_seq = seq
            self.seen[seq] = frame["id"]
            data = frame.get("data") or {}
            if frame["type"] == "part.updated" and isinstance(data.get("text"), str):
                self.text[data["id"]] = data["text"]  # text and reasoning parts
            if (
                frame["type"] == "message.updated"
                and data.get("role") == "assistant"
                and data.get("completed_at")
            ):
                session.completed(data["id"], now, data.get("error"))
        elif kind == "snapshot":
            self.text[frame["part_id"]] = frame["text"]
        elif kind == "delta":
            session.first_delta(frame["message_id"], now)
            have = self.text.get(frame["part_id"])
            offset = int(frame["offset"])
            if have is None or offset > len(have):
                self.delta_holes += 1
            elif offset < len(have):
                self.delta_duplicates += 1
            else:
                self.text[frame["part_id"]] = have + frame["delta"]
        return True


@dataclass
class SoakSession:
    number: int
    session_id: str
    token: str
    ws: Face = field(default_factory=lambda: Face("ws"))
    sse: Face = field(default_factory=lambda: Face("sse"))
    accepted: dict[str, float] = field(default_factory=dict)  # message id → prompt sent
    first_at: dict[str, float] = field(default_factory=dict)
    done_at: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # message id → its error
    waiters: dict[str, asyncio.Event] = field(default_factory=dict)

    def first_delta(self, message_id: str, now: float) -> None:
        self.first_at.setdefault(message_id, now)

    def completed(self, message_id: str, now: float, error: Any) -> None:
        if message_id not in self.done_at:
            self.done_at[message_id] = now
            if error:
                if isinstance(error, dict):
                    detail = error.get("message") or ""
                    error = f"{error.get('name')}: {str(detail)[:70]}"
                self.failed[message_id] = str(error)
        waiter = self.waiters.get(message_id)
        if waiter is not None:
            waiter.set()


@dataclass
class Record:
    """What happened over the run, by time (seconds since the start)."""

    start: float
    turns: list[tuple[float, float | None, float]] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    faults: list[tuple[float, float, str]] = field(default_factory=list)

    def error(self, kind: str) -> None:
        self.errors.append((time.monotonic() - self.start, kind))


def _kind(exc: BaseException) -> str:
    return type(exc).__name__


# --- the clients --------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, url: str, record: Record) -> None:
        self.args = args
        self.url = url.rstrip("/")
        self.record = record
        self.stop_streams = asyncio.Event()

    def headers(self, session: SoakSession) -> dict[str, str]:
        return {"Authorization": f"Token {session.token}", "Origin": self.url}

    async def websocket(self, session: SoakSession) -> None:
        face, backoff = session.ws, 0.2
        base = self.url.replace("http", "ws", 1)
        while not self.stop_streams.is_set():
            face.text = {}
            url = f"{base}/ws/sessions/{session.session_id}/?after={face.last_seq}"
            try:
                async with websockets.connect(
                    url, additional_headers=self.headers(session), open_timeout=15, max_size=None
                ) as ws:
                    face.connects += 1
                    backoff = 0.2
                    stopping = asyncio.ensure_future(self.stop_streams.wait())
                    try:
                        while True:
                            receive = asyncio.ensure_future(ws.recv())
                            done, _ = await asyncio.wait(
                                {receive, stopping}, return_when=asyncio.FIRST_COMPLETED
                            )
                            if receive not in done:
                                receive.cancel()
                                return
                            frame = json.loads(receive.result())
                            if not face.take(frame, session, time.monotonic()):
                                self.record.error("ws gap: resync")
                                break
                    finally:
                        stopping.cancel()
            except websockets.InvalidStatus as exc:
                self.record.error(f"ws connect {exc.response.status_code}")
            except (websockets.ConnectionClosed, OSError, TimeoutError) as exc:
                self.record.error(f"ws dropped ({_kind(exc)})")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def sse(self, session: SoakSession, http: httpx.AsyncClient) -> None:
        face, backoff = session.sse, 0.2
        path = f"/api/sessions/{session.session_id}/stream/"
        while not self.stop_streams.is_set():
            face.text = {}
            try:
                async with http.stream(
                    "GET", path, params={"after": face.last_seq}, headers=self.headers(session)
                ) as stream:
                    if stream.status_code != 200:
                        self.record.error(f"sse {stream.status_code}")
                    else:
                        face.connects += 1
                        backoff = 0.2
                        async for line in stream.aiter_lines():
                            if self.stop_streams.is_set():
                                return
                            if not line.startswith("data:"):
                                continue
                            frame = json.loads(line[5:])
                            if not face.take(frame, session, time.monotonic()):
                                self.record.error("sse gap: resync")
                                break
            except (httpx.TransportError, OSError) as exc:
                self.record.error(f"sse dropped ({_kind(exc)})")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def chat(self, session: SoakSession, http: httpx.AsyncClient, until: float) -> None:
        """Prompt, wait for the reply's end, pause; until the deadline."""
        words = " ".join(f"w{session.number}x{n}" for n in range(self.args.words))
        reply_bound = self.args.words * 0.2 + self.args.lease + MARGIN + 20
        path = f"/api/sessions/{session.session_id}/messages/"
        while time.monotonic() < until:
            sent = time.monotonic()
            try:
                response = await http.post(
                    path, json={"text": words}, headers=self.headers(session), timeout=30
                )
            except httpx.TransportError as exc:
                self.record.error(f"prompt {_kind(exc)}")
                await asyncio.sleep(1.0)
                continue
            if response.status_code != 202:
                self.record.error(f"prompt {response.status_code}")
                await asyncio.sleep(1.0 if response.status_code != 429 else 5.0)
                continue
            message_id = response.json()["assistant_message_id"]
            session.accepted[message_id] = sent
            waiter = session.waiters.setdefault(message_id, asyncio.Event())
            if message_id in session.done_at:
                waiter.set()
            try:
                await asyncio.wait_for(waiter.wait(), reply_bound)
            except TimeoutError:
                self.record.error("reply not seen to its end")
                continue
            finally:
                session.waiters.pop(message_id, None)
            done = session.done_at[message_id] - sent
            first = session.first_at.get(message_id)
            at = time.monotonic() - self.record.start
            self.record.turns.append((at, None if first is None else first - sent, done))
            if message_id in session.failed:
                self.record.error(f"reply ended with {session.failed[message_id]}")
            await asyncio.sleep(self.args.think * (0.5 + random.random()))


# --- faults -------------------------------------------------------------------------


FAULTS = ("daphne", "redis", "replica", "primary")


def inject(cluster: Any, config: Any, kind: str, turn: int) -> str:
    """One fault, done and undone; what it did. Runs in a thread."""
    if kind == "daphne":
        index = turn % config.daphnes
        name = cluster.daphne_names(config)[index]
        pid = cluster.running(name)
        cluster.restart_daphne(config, index, down_for=2.0)
        return f"kill -9 {name} (pid {pid}), restarted after 2 s"
    if kind == "redis":
        index = turn % config.redis_shards
        cluster.restart_redis_shard(config, index)
        return f"restart of Redis shard {config.redis_ports[index]}"
    if kind == "replica":
        config.replica.stop()
        time.sleep(3.0)
        config.replica.start()
        return f"pg_ctl stop / start of the replica ({config.replica.port}), down 3 s"
    paused = config.primary.pause(3.0)
    return f"SIGSTOP / SIGCONT of the primary ({config.primary.port}, {paused} processes), 3 s"


async def faults(
    cluster: Any, config: Any, record: Record, every: float, until: float, only: list[str]
) -> None:
    turn = 0
    next_at = time.monotonic() + min(every, 10.0)
    while next_at < until and turn < 1000:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        kind = only[turn % len(only)]
        began = time.monotonic() - record.start
        try:
            what = await asyncio.to_thread(inject, cluster, config, kind, turn // len(only))
        except (Exception, SystemExit) as exc:  # reported; the soak goes on
            what = f"{kind} fault FAILED: {exc}"
            record.error(f"fault {kind} failed")
        ended = time.monotonic() - record.start
        record.faults.append((began, ended, what))
        print(f"  [{began:6.1f} s] fault: {what} ({ended - began:.1f} s)", flush=True)
        turn += 1
        next_at = max(next_at + every, time.monotonic() + 1.0)


async def minutes(record: Record, until: float) -> None:
    """Print each minute's row as it ends (the table at the end repeats them)."""
    minute = 1
    while record.start + minute * 60 <= until + 1:
        await asyncio.sleep(max(0.0, record.start + minute * 60 - time.monotonic()))
        print("  " + " | ".join(minute_row(record, minute - 1)), flush=True)
        minute += 1


def minute_row(record: Record, minute: int) -> list[str]:
    low, high = minute * 60, (minute + 1) * 60
    turns = [t for t in record.turns if low <= t[0] < high]
    firsts = [t[1] for t in turns if t[1] is not None]
    dones = [t[2] for t in turns]
    errors = collections.Counter(kind for at, kind in record.errors if low <= at < high)

    def pair(values: list[float]) -> str:
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        return "-" if p50 is None or p99 is None else f"{p50:.2f} / {p99:.2f}"

    return [
        str(minute + 1),
        str(len(turns)),
        pair(firsts),
        pair(dones),
        ", ".join(f"{kind} x{n}" for kind, n in sorted(errors.items())) or "-",
    ]


# --- the end: the log against what the clients saw ------------------------------------


async def read_log(http: httpx.AsyncClient, session: SoakSession, headers: dict[str, str]) -> list:
    events: list[dict[str, Any]] = []
    for _ in range(10_000):  # pages of 500; bounded
        response = await http.get(
            f"/api/sessions/{session.session_id}/events/",
            params={"after": events[-1]["seq"] if events else 0, "limit": 500},
            headers=headers,
        )
        response.raise_for_status()
        page = response.json()["results"]
        events += page
        if len(page) < 500:
            break
    return events


def open_replies(events: list[dict[str, Any]]) -> list[str]:
    last: dict[str, dict[str, Any]] = {}
    for event in events:
        data = event.get("data") or {}
        if event["type"] == "message.updated" and data.get("role") == "assistant":
            last[data["id"]] = data
        elif event["type"] == "message.removed":
            last.pop(data.get("id") or data.get("message_id", ""), None)
    return [mid for mid, info in last.items() if not info.get("completed_at")]


def lost_events(session: SoakSession, events: list[dict[str, Any]]) -> list[str]:
    in_log = {e["seq"]: e["id"] for e in events}
    completed = {
        e["data"]["id"]
        for e in events
        if e["type"] == "message.updated"
        and (e.get("data") or {}).get("role") == "assistant"
        and e["data"].get("completed_at")
    }
    messages = {(e.get("data") or {}).get("id") for e in events if e["type"] == "message.updated"}
    lost = []
    for face in (session.ws, session.sse):
        for seq, event_id in face.seen.items():
            if in_log.get(seq) != event_id:
                lost.append(f"{face.name} was told of seq {seq} ({event_id}), the log has not")
    for message_id in session.accepted:
        if message_id not in messages:
            lost.append(f"accepted reply {message_id} is not in the log")
    for message_id in session.done_at:
        if message_id not in completed:
            lost.append(f"completed reply {message_id} is not completed in the log")
    return lost


# --- the run ------------------------------------------------------------------------


def setup_users(cluster: Any, config: Any, count: int) -> list[str]:
    """One user (own tenant) per session, each with an API token; their tokens."""
    run = f"soak{os.getpid()}x{int(time.time()) % 100000}"
    script = (
        "from accounts.services import create_user\n"
        f"for n in range({count}):\n"
        f"    made = create_user(username=f'{run}-{{n}}', tenant_name=f'{run}-{{n}}', "
        "with_token=True)\n"
        "    print('TOKEN', made.token)\n"
    )
    out = cluster.manage(config, "shell", "-c", script)
    return [line.split()[1] for line in out.splitlines() if line.startswith("TOKEN ")]


def check_projections(cluster: Any, config: Any) -> tuple[bool, str]:
    done = subprocess.run(
        [str(cluster.BIN / "python"), "manage.py", "rebuild_projections", "--check"],
        cwd=ROOT,
        env=config.app_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done.returncode == 0, (done.stdout + done.stderr).strip()


async def run(args: argparse.Namespace, cluster: Any, config: Any) -> int:
    tokens = setup_users(cluster, config, args.sessions)
    url = config.url
    limits = httpx.Limits(max_connections=args.sessions * 4, max_keepalive_connections=0)
    timeout = httpx.Timeout(30.0, read=60.0)
    async with (
        httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http,
        httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as streams,
    ):
        sessions = []
        for n, token in enumerate(tokens):
            response = await http.post(
                "/api/sessions/",
                json={"title": f"soak {n}"},
                headers={"Authorization": f"Token {token}"},
            )
            response.raise_for_status()
            sessions.append(SoakSession(n, response.json()["id"], token))
        record = Record(start=time.monotonic())
        soak = Soak(args, url, record)
        until = record.start + args.duration
        readers = [
            asyncio.create_task(task)
            for s in sessions
            for task in (soak.websocket(s), soak.sse(s, streams))
        ]
        await asyncio.sleep(1.0)  # the streams connect before the first prompt
        only = [f for f in FAULTS if f in args.faults.split(",")] if args.faults else []
        background = [asyncio.create_task(minutes(record, until))]
        if only:
            background.append(
                asyncio.create_task(
                    faults(cluster, config, record, args.fault_every, until - 20, only)
                )
            )
        await asyncio.gather(*(soak.chat(s, http, until) for s in sessions))
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        # The lease plus a margin after the last fault (or the last prompt): a turn a
        # dead daphne left open must be finalized by then.
        settle = max([f[1] for f in record.faults] + [time.monotonic() - record.start])
        head_wait = record.start + settle + args.lease + MARGIN
        logs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(1000):  # bounded by head_wait
            for s in sessions:
                logs[s.session_id] = await read_log(http, s, {"Authorization": f"Token {s.token}"})
            caught_up = all(
                min(s.ws.last_seq, s.sse.last_seq) >= len(logs[s.session_id]) for s in sessions
            )
            if time.monotonic() >= head_wait and caught_up:
                break
            if time.monotonic() >= head_wait + 15:
                break
            await asyncio.sleep(1.0)
        soak.stop_streams.set()
        await asyncio.gather(*readers, return_exceptions=True)

    lost = [problem for s in sessions for problem in lost_events(s, logs[s.session_id])]
    still_open = [mid for s in sessions for mid in open_replies(logs[s.session_id])]
    faces = [f for s in sessions for f in (s.ws, s.sse)]
    duplicates = sum(f.duplicates + f.delta_duplicates for f in faces)
    out_of_order = sum(f.out_of_order for f in faces)
    behind = sum(1 for s in sessions for f in (s.ws, s.sse) if f.last_seq < len(logs[s.session_id]))
    clean, check_output = check_projections(cluster, config)

    print()
    print(
        f"soak: {args.sessions} sessions x (WebSocket + SSE) through nginx {url}, "
        f"{config.daphnes} daphnes, {config.redis_shards} Redis shards, PostgreSQL primary + "
        f"replica; {args.duration:.0f} s, prompts of {args.words} words (offline/echo), "
        f"lease {args.lease:.0f} s; load average {os.getloadavg()[0]:.2f} at the end"
    )
    header = ["minute", "turns", "first delta p50 / p99 s", "reply end p50 / p99 s", "errors"]
    rows = max(1, -int(-args.duration // 60))  # minutes begun while prompting
    print_table(header, [minute_row(record, m) for m in range(rows)])
    print()
    print("faults:")
    for began, ended, what in record.faults:
        print(f"  {began:6.1f} s  {what} ({ended - began:.1f} s)")
    print()
    turns = len(record.turns)
    accepted = sum(len(s.accepted) for s in sessions)
    events = sum(len(v) for v in logs.values())
    print(f"turns done: {turns} (prompts accepted {accepted}); events in the logs: {events}")
    print(
        f"reconnects: ws {sum(s.ws.connects for s in sessions) - len(sessions)}, "
        f"sse {sum(s.sse.connects for s in sessions) - len(sessions)}; ephemeral delta holes "
        f"(mended by the part's end): {sum(f.delta_holes for f in faces)}; client faces behind "
        f"the log at the end: {behind}"
    )
    verdict = [
        ("events lost", len(lost)),
        ("replies left open after the lease + margin", len(still_open)),
        ("duplicate frames seen by clients", duplicates),
        ("out-of-order frames seen by clients", out_of_order),
        ("sessions whose projections differ from their log", 0 if clean else 1),
    ]
    for what, count in verdict:
        print(f"{what}: {count}{'' if count == 0 else '   <-- must be 0'}")
    print(f"rebuild_projections --check: {check_output.splitlines()[-1] if check_output else ''}")
    for problem in lost[:20]:
        print(f"  lost: {problem}")
    for message_id in still_open[:20]:
        print(f"  open: {message_id}")
    if not clean:
        print(check_output[-3000:])
    return 0 if all(count == 0 for _, count in verdict) else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of chatting")
    parser.add_argument("--short", action="store_true", help=f"{SHORT_SECONDS} s (CI)")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--words", type=int, default=40, help="words a prompt (and reply) has")
    parser.add_argument("--think", type=float, default=0.5, help="pause between turns (mean s)")
    parser.add_argument("--fault-every", type=float, default=None, help="s (30; 15 --short)")
    parser.add_argument("--faults", default=",".join(FAULTS), help="which, in this order")
    parser.add_argument("--daphnes", type=int, default=3, help="of the soak's own cluster")
    parser.add_argument("--lease", type=float, default=None, help="FORGE_LEASE_SECONDS")
    parser.add_argument("--existing", action="store_true", help="the running CLUSTER_* one")
    parser.add_argument("--keep", action="store_true", help="leave the own cluster running")
    args = parser.parse_args()
    if args.short:
        args.duration = float(SHORT_SECONDS)
    if args.fault_every is None:
        args.fault_every = 15.0 if args.duration <= SHORT_SECONDS else 30.0
    if not 1 <= args.sessions <= 200 or not 10 <= args.duration <= 24 * 3600:
        parser.error("--sessions 1..200 and --duration 10..86400")
    if not args.existing:
        os.environ.update(own_cluster_env(args.daphnes, args.lease or 8.0))
    args.lease = args.lease or float(os.environ.get("FORGE_LEASE_SECONDS") or 15.0)
    sys.path.insert(0, str(ROOT))
    from cluster import cluster  # reads CLUSTER_DIR when imported

    config = cluster.Config.from_env()
    if not args.existing:
        cluster.up(config)
    elif not all(cluster._states(config).values()):
        print(f"the cluster in {cluster.VAR} is not (wholly) running: make cluster")
        return 2
    try:
        return asyncio.run(run(args, cluster, config))
    finally:
        if not args.existing and not args.keep:
            cluster.down(config)
            import shutil

            shutil.rmtree(cluster.VAR, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
