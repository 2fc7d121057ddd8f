"""The incremental context cache's memory: RSS stays flat once the byte cap is reached.

Appends N turns (default 10,000) round-robin over M sessions (default 500) in one
process, each turn the runtime's writes for a one-step text reply (three
``services.append_batch`` units, as ``forge.runtime`` commits them: the prompt; the
step-start with the text part opened; the finished text part, the step-finish and
the message's completion, with the context snapshot when one is due, as
``complete_reply`` stores it; ~400 characters each side), then what the run loop
reads for it: ``forge.context.request_for`` (before the step) and
``forge.context.visible_history`` (the pruning after it), which fold the turn into
the session's cached state and put it back (``forge.context.incremental``).

Runs once per byte cap (``--caps``, default 4 MiB and the default 64 MiB), each in a
process of its own on a fresh SQLite file, the session cap raised above M so that
only the byte cap evicts. Prints a row every N/10 turns: the process's RSS
(``VmRSS`` from ``/proc/self/status``), the cache's estimated bytes
(``cache.nbytes``), its entries and evictions.

``--trace`` adds a second table: the estimate against the memory the cache really
holds, measured with ``tracemalloc`` (the traced bytes freed by ``cache.clear()``,
after a ``gc.collect()``), for ``--trace-turns`` turns over ``--trace-sessions``; the
estimate is the states' ``cost``, of which *memo* is the snapshot memo's chunks
(``Derived.memo_bytes``).

    .venv/bin/python bench/cache_memory.py [--turns 10000] [--sessions 500]
                                           [--caps 4194304,67108864] [--trace]

Timings are not the point and are not printed; nothing here is asserted by tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from table import print_table, run_worker, start_django  # bench/ comes first on sys.path

BENCH_DB = "forge_bench_cache_memory"
USER_TEXT = ("Please summarise the attached notes about the quarterly plan. " * 7)[:400]
REPLY_TEXT = ("The plan moves the launch to May and keeps the budget flat. " * 7)[:400]
MB = 1024 * 1024


def rss_bytes() -> int:
    """This process's resident set (``VmRSS``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def write_turn(session: Any) -> None:
    """One turn's writes in the runtime's three units, ids in the runtime's order (the
    step-start's before the text part's, as ``forge.runtime.processor`` makes them);
    the last with the context snapshot, when one is due."""
    from django.db import transaction

    from forge.context import store_snapshot
    from sessions import services
    from sessions.ids import new_message_id, new_part_id
    from sessions.log import format_time, now_ms

    user_id, assistant_id = new_message_id(), new_message_id()
    step_id, text_id, finish_id = new_part_id(), new_part_id(), new_part_id()
    started = format_time(now_ms())
    tokens = {"input": 100, "output": 80, "reasoning": 0, "cache_read": 0, "cache_write": 0}
    text = {"id": text_id, "message_id": assistant_id, "type": "text"}
    message, part = services.UpdateMessage, services.UpdatePart
    services.append_batch(
        session=session,
        writes=[
            message(info={"id": user_id, "role": "user", "agent": "build"}),
            part(part={"message_id": user_id, "type": "text", "text": USER_TEXT}),
            message(info={"id": assistant_id, "role": "assistant", "parent_id": user_id}),
        ],
    )
    services.append_batch(
        session=session,
        writes=[
            part(part={"id": step_id, "message_id": assistant_id, "type": "step-start"}),
            part(part={**text, "text": "", "time": {"start": started}}),
        ],
    )
    done = format_time(now_ms())
    with transaction.atomic():
        last = services.append_batch(
            session=session,
            writes=[
                part(part={**text, "text": REPLY_TEXT, "time": {"start": started, "end": done}}),
                part(
                    part={
                        "id": finish_id,
                        "message_id": assistant_id,
                        "type": "step-finish",
                        "reason": "stop",
                        "tokens": tokens,
                        "cost": 0.0,
                    }
                ),
                message(info={"id": assistant_id, "finish": "stop", "completed_at": done}),
            ],
        )
        store_snapshot(session, last)


def sessions_for(count: int) -> list[Any]:
    from accounts.services import create_user
    from sessions import services

    user = create_user(username="bench", tenant_name="bench", validate=False).user
    return [services.create_session(user=user, title=f"s{n}") for n in range(count)]


def run_turns(sessions: list[Any], turns: int, every: int) -> list[dict[str, Any]]:
    """Append ``turns`` turns round-robin, reading each as the run loop does; a sample
    every ``every`` turns."""
    from forge.context import request_for, visible_history
    from forge.context.incremental import cache

    samples = []
    for n in range(1, turns + 1):
        session = sessions[n % len(sessions)]
        write_turn(session)
        request_for(session)
        visible_history(session)
        if n % every == 0 or n == turns:
            samples.append(
                {
                    "turns": n,
                    "rss": rss_bytes(),
                    "estimate": cache.nbytes,
                    "entries": len(cache),
                    "evicted": cache.stats["evicted"],
                    "hits": cache.stats["hit"],
                    "fallbacks": sum(v for k, v in cache.stats.items() if k.startswith("fallback")),
                }
            )
    return samples


def worker(args: argparse.Namespace) -> dict[str, Any]:
    mode, _, value = args.worker.partition(":")
    cap = int(value)
    start_django(
        "sqlite", "", BENCH_DB,
        FORGE_CONTEXT_CACHE_BYTES=str(cap),
        FORGE_CONTEXT_CACHE_SIZE=str(max(args.sessions, args.trace_sessions) + 1),
        FORGE_CONTEXT_CACHE_MESSAGES="100000000",
    )  # fmt: skip
    if mode == "rss":
        sessions = sessions_for(args.sessions)
        before = rss_bytes()
        samples = run_turns(sessions, args.turns, max(1, args.turns // 10))
        return {"cap": cap, "rss_before": before, "samples": samples}
    import gc
    import tracemalloc

    from forge.context.incremental import cache

    sessions = sessions_for(args.trace_sessions)
    tracemalloc.start()
    run_turns(sessions, args.trace_turns, args.trace_turns)
    gc.collect()
    held, estimate, entries = tracemalloc.get_traced_memory()[0], cache.nbytes, len(cache)
    messages = sum(len(d) for d in cache._entries.values())
    memo = sum(getattr(d, "memo_bytes", 0) for d in cache._entries.values())
    cache.clear()
    gc.collect()
    real = held - tracemalloc.get_traced_memory()[0]
    return {
        "estimate": estimate,
        "memo": memo,
        "real": real,
        "entries": entries,
        "messages": messages,
    }


def child(args: argparse.Namespace, worker_arg: str) -> dict[str, Any]:
    argv = [a for a in sys.argv[1:] if a != "--trace"]
    return run_worker(__file__, argv, worker_arg)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--caps", default=f"{4 * MB},{64 * MB}")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--trace-turns", type=int, default=2_000)
    parser.add_argument("--trace-sessions", type=int, default=100)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    rows = []
    for cap in (int(c) for c in args.caps.split(",")):
        result = child(args, f"rss:{cap}")
        for s in result["samples"]:
            rows.append(
                [
                    f"{cap / MB:.0f}",
                    f"{s['turns']:,}",
                    f"{s['rss'] / MB:.1f}",
                    f"{(s['rss'] - result['rss_before']) / MB:.1f}",
                    f"{s['estimate'] / MB:.2f}",
                    f"{s['entries']:,}",
                    f"{s['evicted']:,}",
                    f"{s['fallbacks']:,}",
                ]
            )
    print(f"{args.turns:,} turns over {args.sessions:,} sessions (SQLite, one process per cap)")
    print_table(
        ["cap MiB", "turns", "RSS MiB", "RSS growth MiB", "estimate MiB", "entries",
         "evicted", "fallbacks"],
        rows,
    )  # fmt: skip
    if args.trace:
        traced = child(args, "trace:0")
        print()
        print(
            f"estimate vs traced memory: {args.trace_turns:,} turns over "
            f"{args.trace_sessions:,} sessions, no byte cap"
        )
        print_table(
            ["entries", "messages", "estimate MiB", "memo MiB", "traced MiB", "traced / estimate"],
            [
                [
                    f"{traced['entries']:,}",
                    f"{traced['messages']:,}",
                    f"{traced['estimate'] / MB:.2f}",
                    f"{traced['memo'] / MB:.2f}",
                    f"{traced['real'] / MB:.2f}",
                    f"{traced['real'] / traced['estimate']:.2f}",
                ]
            ],
        )


if __name__ == "__main__":
    main()
