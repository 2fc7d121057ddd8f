"""The cost of deriving the model's context behind a summary boundary.

For sessions holding 1,000, 10,000 and 100,000 messages (user and assistant
turns, one 200-character text part each) followed by a compaction boundary
(``forge.context.boundary.record_compaction``, the live path) and 10 newer
messages, times ``forge.context.request_for(session)`` — what the run loop
calls before every step — and, for comparison, reading the whole history
without the boundary's indexed start (``iter_history`` + ``filter_compacted``).
Also prints the bytes stored per message (log + messages + parts, with their
indexes; SQLite also keeps the full-text index).

Sessions are loaded through ``sessions.services.import_log`` (a verified log,
bulk-inserted), on a fresh database per engine, each in its own process.

    python bench/context.py [--sizes 1000,10000,100000] [--engines sqlite,postgres]
                            [--postgres-url postgres://postgres@127.0.0.1:5432/postgres]

Aim: 100,000 messages within 1.5 x the time of 1,000.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from append import stored_bytes  # bench/ comes first on sys.path: python bench/<name>.py
from table import engine_arguments, per_engine, print_table, use_fresh_database

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "forge_bench_context"
TEXT = "x" * 200
RUNS = 30


def build_log(session_id: str, messages: int) -> list[dict[str, Any]]:
    """A verified log: session.created, then ``messages`` messages with one text part."""
    from sessions.ids import new_event_id, new_message_id, new_part_id
    from sessions.log import GENESIS_HASH, chain_hash, event_body, format_time
    from sessions.shapes import normalize_message, normalize_part

    start = datetime(2026, 1, 1, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    previous = GENESIS_HASH

    def add(kind: str, data: dict[str, Any]) -> None:
        nonlocal previous
        seq = len(events) + 1
        at = format_time(start + timedelta(milliseconds=seq))
        body = event_body(
            seq=seq, id=new_event_id(), session_id=session_id, type=kind, at=at, data=data
        )
        previous = chain_hash(previous, body)
        events.append({**body, "hash": previous})

    created = format_time(start)
    add(
        "session.created",
        {"id": session_id, "title": "bench", "agent": None, "parent_id": None,
         "created_at": created},
    )  # fmt: skip
    parent = None
    for n in range(messages):
        role = "user" if n % 2 == 0 else "assistant"
        info: dict[str, Any] = {"id": new_message_id(), "role": role, "created_at": created}
        if role == "assistant":
            info.update(parent_id=parent, completed_at=created, finish="stop")
        else:
            parent = info["id"]
        add("message.updated", normalize_message(info, session_id=session_id, existing=None))
        part = {"id": new_part_id(), "message_id": info["id"], "type": "text", "text": TEXT}
        add("part.updated", normalize_part(part, session_id=session_id, existing=None))
    return events


def worker(engine: str, sizes: list[int], postgres_url: str) -> dict[str, Any]:
    use_fresh_database(engine, postgres_url, BENCH_DB)
    os.environ.pop("REDIS_URL", None)
    os.environ["FORGE_DEBUG"] = "0"
    os.environ["DJANGO_SETTINGS_MODULE"] = "forge.settings.dev"
    sys.path.insert(0, str(ROOT))

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from accounts.services import create_user
    from forge.context import request_for
    from forge.context.boundary import record_compaction
    from forge.context.compacted import filter_compacted
    from sessions import selectors, services
    from sessions.ids import new_session_id
    from sessions.models import Message

    call_command("migrate", verbosity=0)
    user = create_user(username="bench", tenant_name="bench", validate=False).user
    rows = []
    for size in sizes:
        session = services.import_log(user=user, events=build_log(new_session_id(), size))
        record_compaction(
            session, summary=TEXT, auto=True, overflow=True, tail_start_id=None, model="x/y"
        )
        for n in range(10):
            role = "user" if n % 2 == 0 else "assistant"
            message = services.update_message(session=session, info={"role": role}).data
            services.update_part(
                session=session, part={"message_id": message["id"], "type": "text", "text": TEXT}
            )
        _, request = request_for(session)
        assert len(request.messages) == 12, len(request.messages)  # summary pair + 10
        timings = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            request_for(session)
            timings.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        whole = filter_compacted(
            list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
        )
        whole_s = time.perf_counter() - t0
        assert len(whole) == 12
        rows.append(
            {
                "messages": size,
                "p50_ms": statistics.median(timings) * 1000,
                "min_ms": min(timings) * 1000,
                "whole_ms": whole_s * 1000,
            }
        )
    count = Message.objects.count()
    _, all_bytes = stored_bytes(connection)
    if engine == "postgres":
        connection.close()
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
    return {"engine": engine, "rows": rows, "bytes_per_message": all_bytes / count}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    engine_arguments(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        print(json.dumps(worker(args.worker, sizes, args.postgres_url)))
        return
    results = per_engine(__file__, args.engines, sys.argv[1:])
    print(
        "deriving the context (forge.context.request_for) for a session whose history lies "
        f"behind a summary boundary, followed by 10 messages; median of {RUNS} runs"
    )
    table = []
    for result in results:
        base = result["rows"][0]["p50_ms"]
        for row in result["rows"]:
            table.append(
                [
                    result["engine"],
                    f"{row['messages']:,}",
                    f"{row['p50_ms']:.2f}",
                    f"{row['min_ms']:.2f}",
                    f"{row['p50_ms'] / base:.2f}x",
                    f"{row['whole_ms']:.0f}",
                    f"{result['bytes_per_message']:.0f}",
                ]
            )
    print_table(
        [
            "engine",
            "messages behind the boundary",
            "p50 ms",
            "min ms",
            "vs smallest",
            "whole-history read ms",
            "bytes/message",
        ],
        table,
    )


if __name__ == "__main__":
    main()
