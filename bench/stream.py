"""Streaming through the runtime: replies of 100, 1,000 and 10,000 deltas.

Each reply is a real turn (``forge.runtime.start_turn``) on ``offline/echo``
with no delay, in-process, with the in-memory channel layer: the prompt has N
words, so the reply streams N text deltas (plus a short reasoning block).
A thin wrapper around the echo provider records when the text's first delta
and its end were produced and how long the provider itself took.

Columns:

* events/turn — log events the turn wrote (prompt, reply, steps, parts);
* deltas/s — N over the time from the first text delta to the text's end,
  i.e. through the Processor: buffer, offsets, ``part.delta`` frames on the bus;
* turn ms — from ``start_turn`` to the task's end;
* model ms — time spent inside the provider's stream;
* overhead ms — the turn minus its streaming phase: validating and logging the
  prompt, the lease, deriving the request, step and message writes, release.

    python bench/stream.py [--engines sqlite,postgres] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from table import (  # bench/ comes first on sys.path: python bench/<name>.py
    engine_arguments,
    per_engine,
    print_table,
    use_fresh_database,
)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "forge_bench_stream"
SIZES = (100, 1_000, 10_000)


class Timing:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.first_delta = 0.0
        self.text_end = 0.0
        self.inside_model = 0.0


def timed_echo(timing: Timing) -> Any:
    from forge.providers import events as ev
    from forge.providers.offline import EchoProvider

    class TimedEcho:
        name = "bench"

        def __init__(self) -> None:
            self.inner = EchoProvider("echo", delay=0.0)

        async def stream(self, request: Any) -> AsyncIterator[Any]:
            iterator = self.inner.stream(request).__aiter__()
            while True:
                began = time.perf_counter()
                try:
                    event = await iterator.__anext__()
                except StopAsyncIteration:
                    timing.inside_model += time.perf_counter() - began
                    return
                now = time.perf_counter()
                timing.inside_model += now - began
                if isinstance(event, ev.TextDelta) and not timing.first_delta:
                    timing.first_delta = now
                yield event
                if isinstance(event, ev.TextEnd):
                    timing.text_end = time.perf_counter()

    return TimedEcho()


async def measure(repeat: int) -> list[dict[str, Any]]:
    from channels.db import database_sync_to_async

    from accounts.services import create_user
    from forge import providers
    from forge.runtime import start_turn
    from sessions import services
    from sessions.models import SessionEvent

    timing = Timing()
    providers.register("bench", lambda model: timed_echo(timing))
    user = await database_sync_to_async(create_user)(
        username="bench", tenant_name="bench", validate=False
    )
    session = await database_sync_to_async(services.create_session)(user=user.user)

    async def turn(words: int) -> dict[str, float]:
        count = database_sync_to_async(SessionEvent.objects.filter(session=session).count)
        before = await count()
        timing.reset()
        began = time.perf_counter()
        started = await start_turn(session=session, text=" ".join(f"w{i}" for i in range(words)))
        await started.task
        total = time.perf_counter() - began
        streaming = timing.text_end - timing.first_delta
        return {
            "events": await count() - before,
            "deltas_per_s": words / streaming,
            "turn_ms": total * 1000,
            "model_ms": timing.inside_model * 1000,
            "overhead_ms": (total - streaming) * 1000,
        }

    await turn(50)  # warm-up: the first turn also logs the agent's context
    rows = []
    for words in SIZES:
        runs = [await turn(words) for _ in range(repeat if words < 10_000 else max(1, repeat // 2))]
        rows.append(
            {"deltas": words, **{k: statistics.median(r[k] for r in runs) for k in runs[0]}}
        )
    return rows


def worker(engine: str, repeat: int, postgres_url: str) -> dict[str, Any]:
    use_fresh_database(engine, postgres_url, BENCH_DB)
    os.environ.pop("REDIS_URL", None)
    os.environ.update(
        {
            "FORGE_DEBUG": "0",
            "FORGE_MODEL": "bench/echo",
            "FORGE_SMALL_MODEL": "offline/echo",
            "FORGE_RECOVER_ON_START": "0",
            "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
        }
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    rows = asyncio.run(measure(repeat))
    if engine == "postgres":
        from django.db import connections

        from forge.db.worker import close_connections

        close_connections()
        connections.close_all()
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
    return {"engine": engine, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5, help="turns per size (median)")
    engine_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat, args.postgres_url)))
        return
    results = per_engine(__file__, args.engines, sys.argv[1:])
    print(
        "streaming through forge.runtime on offline/echo (no delay), in-memory bus, "
        f"median of {args.repeat} turns per size"
    )
    header = ["engine", "deltas", "events/turn", "deltas/s", "turn ms", "model ms", "overhead ms"]
    table = [
        [
            r["engine"],
            f"{row['deltas']:,}",
            f"{row['events']:.0f}",
            f"{row['deltas_per_s']:,.0f}",
            f"{row['turn_ms']:.1f}",
            f"{row['model_ms']:.1f}",
            f"{row['overhead_ms']:.1f}",
        ]
        for r in results
        for row in r["rows"]
    ]
    print_table(header, table)


if __name__ == "__main__":
    main()
