"""The cost of deriving the model's context behind a summary boundary.

For sessions holding 1,000, 10,000 and 100,000 messages (user and assistant
turns, one 200-character text part each) followed by a compaction boundary
(``forge.context.boundary.record_compaction``, the live path) and 10 newer
messages, times the full derivation (``forge.context.incremental.full_request``,
what ``request_for`` does on a cache miss) and, for comparison, reading the whole history
without the boundary's indexed start (``iter_history`` + ``filter_compacted``).
Also prints the bytes stored per message (log + messages + parts, with their
indexes; SQLite also keeps the full-text index).

Second table: loading the next turn's model input at 100, 400 and 1,600
turns (the runtime's write pattern: user message + text part, assistant
message, step-start, text part, step-finish, message completion; ~400
characters each side), without and with a compaction boundary behind (10
turns after it). *full* derives from the log (``incremental.full_request``,
what every step did before the cache); *incremental* is ``request_for`` with
the per-session cache seeded at the previous step and one new turn (7 events)
to fold, as the run loop finds it; *cold* is ``request_for`` in a process that
never served the session (the cache emptied) after a turn that ended as the
runtime's do (``forge.context.store_snapshot`` in its last write's transaction:
a snapshot every ``FORGE_CONTEXT_SNAPSHOT_EVENTS`` events), so it loads the
newest snapshot and folds the events after it (``FORGE_CONTEXT_SNAPSHOTS=0``:
no snapshot, the cold load derives in full). *snapshot store* is that call's
mean cost per turn, and *snapshot KiB* the stored row's bytes.

Sessions are loaded through ``sessions.services.import_log`` (a verified log,
bulk-inserted), on a fresh database per engine, each in its own process.

    python bench/context.py [--sizes 1000,10000,100000] [--turns 100,400,1600]
                            [--engines sqlite,postgres]
                            [--postgres-url postgres://postgres@127.0.0.1:5432/postgres]

(``--sizes ""`` or ``--turns ""`` skips a table.)

Aims: 100,000 messages within 1.5 x the time of 1,000; the next turn's input at
1,600 turns within 1.5 x the full derivation at 100 turns once a boundary lies
behind (issue 11).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from append import stored_bytes  # bench/ comes first on sys.path: python bench/<name>.py
from table import engine_arguments, per_engine, print_table, start_django

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "forge_bench_context"
TEXT = "x" * 200
TURN_TEXT = "y" * 400
RUNS = 30
AFTER_BOUNDARY = 10  # turns after the boundary, in the boundary rows


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


def build_turn_log(session_id: str, turns: int) -> list[dict[str, Any]]:
    """A verified log of ``turns`` turns in the runtime's write pattern (7 events each)."""
    from sessions.ids import new_event_id, new_message_id, new_part_id
    from sessions.log import GENESIS_HASH, chain_hash, event_body, format_time
    from sessions.shapes import normalize_message, normalize_part

    start = datetime(2026, 1, 1, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    previous = GENESIS_HASH

    def add(kind: str, data: dict[str, Any]) -> dict[str, Any]:
        nonlocal previous
        seq = len(events) + 1
        at = format_time(start + timedelta(milliseconds=seq))
        body = event_body(
            seq=seq, id=new_event_id(), session_id=session_id, type=kind, at=at, data=data
        )
        previous = chain_hash(previous, body)
        events.append({**body, "hash": previous})
        return data

    def message(info: dict[str, Any], existing: dict[str, Any] | None = None) -> dict[str, Any]:
        data = normalize_message(info, session_id=session_id, existing=existing)
        return add("message.updated", data)

    def part(info: dict[str, Any]) -> None:
        add("part.updated", normalize_part(info, session_id=session_id, existing=None))

    created = format_time(start)
    add(
        "session.created",
        {"id": session_id, "title": "bench", "agent": None, "parent_id": None,
         "created_at": created},
    )  # fmt: skip
    for _ in range(turns):
        asked = message({"id": new_message_id(), "role": "user", "created_at": created})
        part({"id": new_part_id(), "message_id": asked["id"], "type": "text", "text": TURN_TEXT})
        reply = message(
            {"id": new_message_id(), "role": "assistant", "parent_id": asked["id"],
             "created_at": created}
        )  # fmt: skip
        part({"id": new_part_id(), "message_id": reply["id"], "type": "step-start"})
        part({"id": new_part_id(), "message_id": reply["id"], "type": "text", "text": TURN_TEXT})
        part(
            {"id": new_part_id(), "message_id": reply["id"], "type": "step-finish",
             "reason": "stop", "cost": 0, "tokens": {"input": 1, "output": 1}}
        )  # fmt: skip
        message({"id": reply["id"], "finish": "stop", "completed_at": created}, reply)
    return events


def write_turn(session: Any) -> None:
    """One turn through the services, as the runtime writes it (7 events)."""
    from sessions import services

    asked = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": asked, "type": "text", "text": TURN_TEXT}
    )
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": asked}
    ).data["id"]
    services.update_part(session=session, part={"message_id": reply, "type": "step-start"})
    services.update_part(
        session=session, part={"message_id": reply, "type": "text", "text": TURN_TEXT}
    )
    services.update_part(
        session=session,
        part={"message_id": reply, "type": "step-finish", "reason": "stop", "cost": 0,
              "tokens": {"input": 1, "output": 1}},
    )  # fmt: skip
    services.update_message(
        session=session,
        info={"id": reply, "finish": "stop", "completed_at": "2026-01-01T00:00:00.000Z"},
    )


def next_turn_rows(user: Any, turns_list: list[int]) -> list[dict[str, Any]]:
    """Full vs incremental load of the next turn's input (see the module's docstring)."""
    from django.db import transaction

    from forge.context import request_for, store_snapshot
    from forge.context.boundary import record_compaction
    from forge.context.incremental import cache, full_request, request_bytes
    from sessions import services
    from sessions.ids import new_session_id
    from sessions.models import ContextSnapshot

    rows = []
    for turns in turns_list:
        for boundary in (False, True):
            before = turns - AFTER_BOUNDARY if boundary else turns
            events = build_turn_log(new_session_id(), before)
            session = services.import_log(user=user, events=events)
            if boundary:
                record_compaction(
                    session, summary=TURN_TEXT, auto=True, overflow=True, tail_start_id=None,
                    model="x/y",
                )  # fmt: skip
                for _ in range(AFTER_BOUNDARY):
                    write_turn(session)
            full = []
            for _ in range(RUNS):
                t0 = time.perf_counter()
                full_request(session)
                full.append(time.perf_counter() - t0)
            cache.clear()
            request_for(session)  # the previous step's request seeds the cache
            incremental = []
            for _ in range(RUNS):
                write_turn(session)
                t0 = time.perf_counter()
                request_for(session)
                incremental.append(time.perf_counter() - t0)
            assert request_bytes(request_for(session)) == request_bytes(full_request(session))
            assert cache.stats["hit"] == RUNS + 1, cache.stats
            assert cache.stats["folded"] == RUNS * 7, cache.stats
            # Cold: a process that never served the session. Each turn ends as the runtime's
            # does (``store_snapshot`` in its last write's transaction, which stores one every
            # FORGE_CONTEXT_SNAPSHOT_EVENTS events), then the cache is emptied.
            cold, store = [], []
            for _ in range(RUNS):
                with transaction.atomic():
                    write_turn(session)
                    t0 = time.perf_counter()
                    store_snapshot(session)
                    store.append(time.perf_counter() - t0)
                cache.clear()
                t0 = time.perf_counter()
                request_for(session)
                cold.append(time.perf_counter() - t0)
            snapshot_bytes = ContextSnapshot.objects.filter(session=session).values_list(
                "state", flat=True
            )
            size = len(bytes(snapshot_bytes[0])) if snapshot_bytes else 0
            rows.append(
                {
                    "turns": turns,
                    "boundary": boundary,
                    "full_ms": statistics.median(full) * 1000,
                    "incremental_ms": statistics.median(incremental) * 1000,
                    "cold_ms": statistics.median(cold) * 1000,
                    "store_ms": statistics.mean(store) * 1000,
                    "snapshot_bytes": size,
                }
            )
    return rows


def worker(engine: str, sizes: list[int], postgres_url: str, turns: list[int]) -> dict[str, Any]:
    start_django(engine, postgres_url, BENCH_DB)

    from django.db import connection

    from accounts.services import create_user
    from forge.context.boundary import record_compaction
    from forge.context.compacted import filter_compacted
    from forge.context.incremental import full_request
    from sessions import selectors, services
    from sessions.ids import new_session_id
    from sessions.models import Message

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
        _, request = full_request(session)
        assert len(request.messages) == 12, len(request.messages)  # summary pair + 10
        timings = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            full_request(session)
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
    turn_rows = next_turn_rows(user, turns)
    count = Message.objects.count()
    _, all_bytes = stored_bytes(connection)
    if engine == "postgres":
        connection.close()
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
    return {
        "engine": engine,
        "rows": rows,
        "turn_rows": turn_rows,
        "bytes_per_message": all_bytes / max(count, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--turns", default="100,400,1600")
    engine_arguments(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    turns = [int(s) for s in args.turns.split(",") if s]
    if args.worker:
        print(json.dumps(worker(args.worker, sizes, args.postgres_url, turns)))
        return
    results = per_engine(__file__, args.engines, sys.argv[1:])
    if sizes:
        print_boundary_table(results)
    if turns:
        print_next_turn_table(results)


def print_boundary_table(results: list[dict[str, Any]]) -> None:
    print(
        "deriving the context in full (forge.context.incremental.full_request) for a session "
        "whose history lies behind a summary boundary, followed by 10 messages; "
        f"median of {RUNS} runs"
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


def print_next_turn_table(results: list[dict[str, Any]]) -> None:
    print()
    print(
        "loading the next turn's model input: full derivation vs the incremental cache "
        f"folding one new turn (7 events); median of {RUNS} runs; "
        f"boundary: a compaction {AFTER_BOUNDARY} turns back"
    )
    table = []
    for result in results:
        base = next(r for r in result["turn_rows"] if not r["boundary"])["full_ms"]
        for row in result["turn_rows"]:
            table.append(
                [
                    result["engine"],
                    f"{row['turns']:,}",
                    "yes" if row["boundary"] else "no",
                    f"{row['full_ms']:.2f}",
                    f"{row['incremental_ms']:.2f}",
                    f"{row['full_ms'] / row['incremental_ms']:.0f}x",
                    f"{row['incremental_ms'] / base:.2f}x",
                    f"{row['cold_ms']:.2f}",
                    f"{row['store_ms']:.2f}",
                    f"{row['snapshot_bytes'] / 1024:.0f}",
                ]
            )
    print_table(
        [
            "engine",
            "turns",
            "boundary behind",
            "full ms",
            "incremental ms",
            "full / incremental",
            "incremental vs full at the fewest turns",
            "cold ms",
            "snapshot store ms/turn",
            "snapshot KiB",
        ],
        table,
    )


if __name__ == "__main__":
    main()
