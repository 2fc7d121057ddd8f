"""Append throughput of the session store: events per second through ``update_part``.

One session, one transaction per event, on SQLite (WAL, a file in a temporary
directory) and on PostgreSQL (a scratch database on the server of
``--postgres-url``), each in its own process. Two workloads per engine:

* ``new part``: every event creates a text part (what text-start, tool-pending
  or step-start write);
* ``update``: every event replaces an existing part (text-end, tool state changes);
* ``append one turn``: the runtime's real write pattern for a one-text turn, 8 events
  (user message + text part, assistant message, step-start, text part opened,
  text part finished, step-finish, message completion; each text ~400 characters),
  twice: as the runtime wrote it before (the prompt in one transaction, then one
  transaction per event: 6) and as it writes it now, in ``append_batch`` batches
  (the prompt; the step-start with the text part opening; the finished text, the
  step-finish and the completion: 3). Latencies of these rows are per turn.

Each event carries a 200-character text. The bus is the in-memory channel
layer, so every append also publishes its frame (no subscriber).

Prints a table: events/s, per-call latency (p50, p99), and the bytes stored per
event (the log table with its indexes; and with the message/part projection).
For scale, each engine also gets a row of raw one-row commits through the bare
driver, measured in the same run (this machine's numbers drift between runs).

    python bench/append.py [--events 5000] [--turns 500] [--engines sqlite,postgres]
                           [--postgres-url postgres://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from table import (  # bench/ comes first on sys.path: python bench/<name>.py
    engine_arguments,
    per_engine,
    print_table,
    start_django,
)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = f"forge_bench_append_{os.getpid()}"  # concurrent runs do not collide
TEXT = "x" * 200
TURN_TEXT = "y" * 400
TURN_EVENTS = 8


def worker(engine: str, events: int, turns: int, postgres_url: str) -> dict[str, Any]:
    """Runs in a child process: set up a fresh database, append, measure."""
    start_django(engine, postgres_url, BENCH_DB)

    from django.db import connection, transaction

    from accounts.services import create_user
    from sessions import services
    from sessions.ids import new_message_id, new_part_id
    from sessions.log import format_time, now_ms
    from sessions.models import SessionEvent

    user = create_user(username="bench", tenant_name="bench", validate=False).user
    session = services.create_session(user=user, title="bench")
    message_id = services.update_message(session=session, info={"role": "user"}).data["id"]

    def new_part() -> Any:
        return services.update_part(
            session=session, part={"message_id": message_id, "type": "text", "text": TEXT}
        )

    for _ in range(200):  # warm up connections, caches, the bus loop
        new_part()
    existing = [new_part().data["id"] for _ in range(100)]

    def measure(label: str, write: Any) -> dict[str, Any]:
        latencies = []
        started = time.perf_counter()
        for n in range(events):
            t0 = time.perf_counter()
            write(n)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
        latencies.sort()
        return {
            "workload": label,
            "events_per_s": events / elapsed,
            "p50_us": statistics.median(latencies) * 1e6,
            "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
        }

    def turn_writes() -> tuple[list[list[Any]], list[Any]]:
        """The batches of one turn, and its message update at the end."""
        user_id, reply_id = new_message_id(), new_message_id()
        start, text_id, finish = new_part_id(), new_part_id(), new_part_id()
        t0 = format_time(now_ms())
        prompt = [
            services.UpdateMessage(info={"id": user_id, "role": "user"}),
            services.UpdatePart(part={"message_id": user_id, "type": "text", "text": TURN_TEXT}),
            services.UpdateMessage(
                info={"id": reply_id, "role": "assistant", "parent_id": user_id}
            ),
        ]
        opening = [
            services.UpdatePart(part={"id": start, "message_id": reply_id, "type": "step-start"}),
            services.UpdatePart(
                part={
                    "id": text_id,
                    "message_id": reply_id,
                    "type": "text",
                    "text": "",
                    "time": {"start": t0},
                }
            ),
        ]
        ending = [
            services.UpdatePart(
                part={"id": text_id, "text": TURN_TEXT, "time": {"start": t0, "end": t0}}
            ),
            services.UpdatePart(
                part={"id": finish, "message_id": reply_id, "type": "step-finish", "reason": "stop"}
            ),
            services.UpdateMessage(info={"id": reply_id, "finish": "stop", "completed_at": t0}),
        ]
        return [prompt, opening, ending], [w for batch in (opening, ending) for w in batch]

    def one_by_one(write: Any) -> Any:
        if isinstance(write, services.UpdateMessage):
            return services.update_message(session=session, info=write.info)
        return services.update_part(session=session, part=write.part)

    def turn_before(n: int) -> None:
        """The runtime's writes before batching: the prompt in one transaction, then one
        transaction per event."""
        (prompt, _, _), step = turn_writes()
        with transaction.atomic():
            for write in prompt:
                one_by_one(write)
        for write in step:
            one_by_one(write)

    def turn_batched(n: int) -> None:
        for batch in turn_writes()[0]:
            services.append_batch(session=session, writes=batch)

    rows = [
        measure("new part", lambda n: new_part()),
        measure(
            "update",
            lambda n: services.update_part(
                session=session,
                part={"id": existing[n % len(existing)], "text": TEXT[:-1] + str(n % 10)},
            ),
        ),
    ]
    count = SessionEvent.objects.count()
    log_bytes, all_bytes = stored_bytes(connection)
    for row in rows:
        row["log_bytes_per_event"] = log_bytes / count
        row["total_bytes_per_event"] = all_bytes / count
    for _ in range(20):  # warm up both ways
        turn_before(0)
        turn_batched(0)
    # Interleaved, so that both rows see the same machine (and the same log length).
    ways = {
        "append one turn, before (6 transactions)": turn_before,
        "append one turn, batched (3 transactions)": turn_batched,
    }
    latencies: dict[str, list[float]] = {label: [] for label in ways}
    for n in range(turns):
        for label, turn in ways.items():
            t0 = time.perf_counter()
            turn(n)
            latencies[label].append(time.perf_counter() - t0)
    for label, times in latencies.items():
        times.sort()
        rows.append(
            {
                "workload": label,
                "events_per_s": TURN_EVENTS * len(times) / sum(times),
                "p50_us": statistics.median(times) * 1e6,
                "p99_us": times[int(len(times) * 0.99)] * 1e6,
                "log_bytes_per_event": float("nan"),
                "total_bytes_per_event": float("nan"),
            }
        )
    rows.append(raw_commits(connection, events))
    if engine == "postgres":
        connection.close()
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as admin:
            # FORCE: the settings' connection pool still holds connections to it.
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    return {"engine": engine, "events": count, "rows": rows}


def raw_commits(connection: Any, events: int) -> dict[str, Any]:
    """For scale: one-row INSERT + COMMIT through the bare driver, same database, same time."""
    raw = connection.connection  # the driver's own connection (sqlite3 / psycopg)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_raw (id INTEGER PRIMARY KEY, v TEXT)")
    latencies = []
    started = time.perf_counter()
    for n in range(events):
        t0 = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.cursor.execute(
                "INSERT INTO bench_raw (id, v) VALUES (%s, %s)".replace(
                    "%s", "?" if connection.vendor == "sqlite" else "%s"
                ),
                (n, TEXT),
            )
        raw.commit()
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "workload": "raw 1-row commit (driver)",
        "events_per_s": events / elapsed,
        "p50_us": statistics.median(latencies) * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
        "log_bytes_per_event": float("nan"),
        "total_bytes_per_event": float("nan"),
    }


def stored_bytes(connection: Any) -> tuple[float, float]:
    """Bytes of the log table with its indexes, and of log + message/part projections."""
    log_tables = ["forge_sessions_sessionevent"]
    all_tables = [*log_tables, "forge_sessions_message", "forge_sessions_part"]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cursor.execute(
                "SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"
            )
            owner = dict(cursor.fetchall())
            cursor.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
            sizes = {owner.get(name, name): 0 for name in owner.values()}
            for name, size in cursor.fetchall():
                sizes[owner.get(name, name)] = sizes.get(owner.get(name, name), 0) + size
            return sum(sizes[t] for t in log_tables), sum(sizes[t] for t in all_tables)
        totals = []
        for tables in (log_tables, all_tables):
            cursor.execute(
                "SELECT SUM(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t",
                [tables],
            )
            totals.append(float(cursor.fetchone()[0]))
        return totals[0], totals[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=5000, help="events per workload")
    parser.add_argument("--turns", type=int, default=500, help="turns per 'append one turn' row")
    engine_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.events, args.turns, args.postgres_url)))
        return
    results = per_engine(__file__, args.engines, sys.argv[1:])
    print(
        f"append throughput through sessions.services: {args.events} events per workload "
        f"(one transaction per event), {args.turns} turns of {TURN_EVENTS} events per 'append "
        "one turn' row (latencies per turn), one session, in-memory bus"
    )
    columns = [
        ("engine", lambda r, row: r["engine"]),
        ("workload", lambda r, row: row["workload"]),
        ("events/s", lambda r, row: f"{row['events_per_s']:.0f}"),
        ("p50 µs", lambda r, row: f"{row['p50_us']:.0f}"),
        ("p99 µs", lambda r, row: f"{row['p99_us']:.0f}"),
        ("log B/event", lambda r, row: _bytes(row["log_bytes_per_event"])),
        ("log+projection B/event", lambda r, row: _bytes(row["total_bytes_per_event"])),
    ]
    table = [[cell(r, row) for _, cell in columns] for r in results for row in r["rows"]]
    print_table([name for name, _ in columns], table)


def _bytes(value: float) -> str:
    return "" if value != value else f"{value:.0f}"  # NaN: not measured for this row


if __name__ == "__main__":
    main()
