"""DialogRolling throughput: ``roll_dialogs``' sweep over many cores, and whether the
cost of one core grows with its history.

Each engine runs in its own process on a fresh database (SQLite: a WAL file in
a temporary directory; PostgreSQL: a scratch database on ``--postgres-url``),
with the offline extractive summarizer and the built-in AfterRolling consumer
(the search index) on. Workloads, each one sweep (``memory.rolling.sweep``,
what ``manage.py roll_dialogs --once`` runs):

* ``N cores``: N cores, each with a full window (``--window`` messages of
  ~100 characters, the threshold) and no history;
* ``short history``: ``--sample`` cores with a full window and no unit yet;
* ``long history``: ``--sample`` cores with a full window whose current unit
  already holds ``--history`` messages and one slice per window's worth.

The setup writes rows directly (bulk inserts), not through ``append_dialogue``.
Columns: cores rolled, the whole sweep in seconds (candidate query, index
catch-up, every core), ms per core, cores per second, and the candidate query
alone.

    python bench/rolling.py [--cores 10000] [--window 20] [--history 5000]
                            [--sample 200] [--engines sqlite,postgres]
                            [--postgres-url postgres://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from table import (  # bench/ comes first on sys.path: python bench/<name>.py
    engine_arguments,
    per_engine,
    print_table,
)

ROOT = Path(__file__).resolve().parent.parent
# The scratch database; FORGE_BENCH_DB names another one (two runs side by side).
BENCH_DB = os.environ.get("FORGE_BENCH_DB", "forge_bench_rolling")
TEXT = "Message {i} of the dialogue: the user asks about deployments and the assistant answers."


def worker(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    """Runs in a child process: set up a fresh database, fill it, sweep, measure."""
    if engine == "sqlite":
        directory = tempfile.mkdtemp(prefix="forge-bench-")
        os.environ["DATABASE_URL"] = f"sqlite:///{directory}/bench.sqlite3"
    else:
        import psycopg

        with psycopg.connect(args.postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
            admin.execute(f"CREATE DATABASE {BENCH_DB}")
        os.environ["DATABASE_URL"] = args.postgres_url.rsplit("/", 1)[0] + f"/{BENCH_DB}"
    os.environ.pop("REDIS_URL", None)
    os.environ["FORGE_DEBUG"] = "0"
    # No connection pool: its idle connections would keep the scratch database from
    # being dropped at the end (one connection on this thread is all a sweep uses).
    os.environ["FORGE_DB_POOL"] = "0"
    os.environ["DJANGO_SETTINGS_MODULE"] = "forge.settings.dev"
    os.environ["FORGE_MEMORY_SUMMARIZER"] = "memory.summarizers.extractive"
    sys.path.insert(0, str(ROOT))

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from accounts.services import create_user
    from memory.models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
    from memory.rolling import RollingOptions, candidate_core_ids, sweep
    from memory.times import now_ms

    call_command("migrate", verbosity=0)
    created = create_user(username="bench", tenant_name="bench", validate=False)
    tenant, user = created.tenant, created.user
    options = RollingOptions.build(threshold=args.window, keep=4, idle_after=86400)
    now = now_ms()

    def make_cores(prefix: str, count: int, history: int) -> list[str]:
        cores = [
            MemoryCore(
                id=f"mco_{prefix}{n:06d}",
                tenant=tenant,
                user=user,
                agent=f"{prefix}-{n}",
                memory_session_id=f"mss_{prefix}{n:06d}",
                last_interaction_at=now,
                window_count=args.window,
                window_next_seq=args.window,
            )
            for n in range(count)
        ]
        MemoryCore.objects.bulk_create(cores, batch_size=1000)
        window = [
            DialogueMessage(
                tenant=tenant,
                core=core,
                seq=i,
                role="user" if i % 2 == 0 else "assistant",
                text=TEXT.format(i=i),
                at=now,
            )
            for core in cores
            for i in range(args.window)
        ]
        DialogueMessage.objects.bulk_create(window, batch_size=2000)
        if history:
            for core in cores:
                unit = MemoryUnit.objects.create(
                    tenant=tenant,
                    core=core,
                    memory_session_id=core.memory_session_id,
                    message_count=history,
                    slice_count=history // args.window,
                )
                MemoryMessage.objects.bulk_create(
                    [
                        MemoryMessage(
                            tenant=tenant,
                            unit=unit,
                            index=i,
                            role="user" if i % 2 == 0 else "assistant",
                            text=TEXT.format(i=i),
                            at=now,
                        )
                        for i in range(history)
                    ],
                    batch_size=2000,
                )
                MemorySlice.objects.bulk_create(
                    [
                        MemorySlice(
                            tenant=tenant,
                            unit=unit,
                            start_index=s * args.window,
                            end_index=(s + 1) * args.window,
                            summary=f"slice {s}: deployments and answers",
                            created_at=now,
                            indexed=True,
                        )
                        for s in range(history // args.window)
                    ],
                    batch_size=2000,
                )
        settle()
        return [core.pk for core in cores]

    def settle() -> None:
        """Start each measurement from a checkpointed database with fresh statistics."""
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("ANALYZE")
                cursor.execute("CHECKPOINT")
            else:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def measure(label: str, core_ids: list[str], history: int) -> dict[str, Any]:
        settle()
        t0 = time.perf_counter()
        candidates = candidate_core_ids(options=options, now=now_ms())
        query_ms = (time.perf_counter() - t0) * 1000
        assert set(core_ids) <= set(candidates)
        profiler = None
        if args.profile and len(core_ids) > args.sample:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        started = time.perf_counter()
        report = sweep(options=options)
        elapsed = time.perf_counter() - started
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{args.profile}.{engine}")
        rolled = report.count("rolled")
        assert rolled == len(core_ids), report.wire()["counts"]
        return {
            "workload": label,
            "history": history,
            "cores": rolled,
            "seconds": elapsed,
            "ms_per_core": elapsed / rolled * 1000,
            "cores_per_s": rolled / elapsed,
            "query_ms": query_ms,
        }

    rows = []
    measure("warm-up", make_cores("w", 50, 0), 0)  # connections, caches, the worker thread
    # The sample rows first, each alone in the table of due cores.
    short = make_cores("s", args.sample, 0)
    rows.append(measure("short history", short, 0))
    long = make_cores("l", args.sample, args.history)
    rows.append(measure("long history", long, args.history))
    many = make_cores("m", args.cores, 0)
    rows.append(measure(f"{args.cores:,} cores", many, 0))
    if engine == "postgres":
        connection.close()
        import psycopg

        with psycopg.connect(args.postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
    return {"engine": engine, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cores", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=20, help="messages per window (threshold)")
    parser.add_argument("--history", type=int, default=5000, help="messages already in a unit")
    parser.add_argument("--sample", type=int, default=200, help="cores per history workload")
    parser.add_argument(
        "--profile", help="cProfile the N-cores sweep into PROFILE.<engine> (pstats format)"
    )
    engine_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    results = per_engine(__file__, args.engines, sys.argv[1:])
    print(
        f"DialogRolling sweeps (memory.rolling.sweep): windows of {args.window} messages, "
        "keep 4, extractive summarizer, search index on"
    )
    columns = [
        ("engine", lambda r, row: r["engine"]),
        ("workload", lambda r, row: row["workload"]),
        ("history msgs/core", lambda r, row: f"{row['history']:,}"),
        ("cores", lambda r, row: f"{row['cores']:,}"),
        ("sweep s", lambda r, row: f"{row['seconds']:.2f}"),
        ("ms/core", lambda r, row: f"{row['ms_per_core']:.2f}"),
        ("cores/s", lambda r, row: f"{row['cores_per_s']:.0f}"),
        ("candidate query ms", lambda r, row: f"{row['query_ms']:.1f}"),
    ]
    table = [[cell(r, row) for _, cell in columns] for r in results for row in r["rows"]]
    print_table([name for name, _ in columns], table)


if __name__ == "__main__":
    main()
