"""Bytes on disk per turn of the session store, and where they go.

One session grows to N = 100, 400 and 1,600 turns (measured at each step, on
SQLite in WAL mode in a temporary file and on a scratch PostgreSQL database).
A turn is the runtime's real write pattern (forge/runtime/prompting.py,
processor.py, steps.py), one transaction per write as today:

    user message, its text part, assistant message, step-start part,
    text part (~400 characters), step-finish part, the message's completion.

The raw text of a turn is the user's text plus the reply's text (UTF-8 bytes);
every byte figure is per turn and its ratio is to that raw text. Sizes are the
growth over the empty, migrated database, divided by N:

* SQLite: ``dbstat`` page bytes per table and index after
  ``PRAGMA wal_checkpoint(TRUNCATE)``; FTS is the ``forge_sessions_part_fts*``
  tables. The WAL column is the -wal file's size before that checkpoint, in KB
  and not per turn: it is bounded by ``wal_autocheckpoint`` (1,000 pages), not
  by the data, and emptied by every checkpoint.
* PostgreSQL: ``pg_table_size`` per table (heap + TOAST), ``pg_relation_size``
  per index (the full-text GIN index counts as FTS); dead row versions of
  updated projection rows count unless ``--vacuum`` (which also flushes the GIN
  index's pending list). WAL is the server's, not measured.

    python bench/storage.py [--turns 100,400,1600] [--engines sqlite,postgres]
                            [--postgres-url postgres://postgres@127.0.0.1:5432/postgres]
                            [--detail]   # one row per index too
                            [--explain]  # the plan of one query per index
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from table import (  # bench/ comes first on sys.path: python bench/<name>.py
    engine_arguments,
    per_engine,
    print_table,
    start_django,
)

ROOT = Path(__file__).resolve().parent.parent
# The scratch database; FORGE_BENCH_DB names another one (two runs side by side).
BENCH_DB = os.environ.get("FORGE_BENCH_DB", "forge_bench_storage")
TABLES = {
    "forge_sessions_sessionevent": "events",
    "forge_sessions_message": "message",
    "forge_sessions_part": "part",
    "forge_sessions_contextsnapshot": "snapshot",
}
_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
    "an",
    "which",
    "but",
    "not",
    "have",
    "all",
    "were",
    "when",
    "we",
    "there",
    "can",
    "more",
    "if",
    "one",
    "their",
    "will",
    "each",
    "about",
    "how",
    "up",
    "out",
    "them",
    "then",
    "she",
    "many",
    "some",
    "so",
    "these",
    "would",
    "other",
    "into",
    "has",
    "her",
    "two",
    "like",
    "him",
    "see",
    "time",
    "could",
    "no",
    "make",
    "than",
    "first",
    "been",
    "its",
    "who",
    "now",
    "people",
    "my",
    "made",
    "over",
    "did",
    "down",
    "only",
    "way",
    "find",
    "use",
    "may",
    "water",
    "long",
    "little",
    "very",
    "after",
    "words",
    "called",
    "just",
    "where",
    "most",
    "know",
    "get",
    "through",
    "back",
    "much",
    "before",
    "go",
    "good",
    "new",
    "write",
    "our",
    "used",
    "me",
    "man",
    "too",
    "any",
    "day",
    "same",
    "right",
    "look",
    "think",
    "also",
    "around",
    "another",
    "came",
    "come",
    "work",
    "three",
    "word",
    "must",
    "because",
    "does",
    "part",
    "even",
    "place",
    "well",
    "such",
    "here",
    "take",
    "why",
    "things",
    "help",
    "put",
    "years",
    "different",
    "away",
]


def prose(rng: random.Random, length: int) -> str:
    """English-like text of about ``length`` characters (compresses like prose does)."""
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length].rstrip() + "."


def worker(
    engine: str, turns: list[int], postgres_url: str, vacuum: bool, explain_plans: bool = False
) -> dict[str, Any]:
    """Runs in a child process: a fresh database, N turns, sizes at each N."""
    start_django(engine, postgres_url, BENCH_DB)

    from django.db import connection

    from accounts.services import create_user
    from sessions import services
    from sessions.ids import new_message_id

    user = create_user(username="bench", tenant_name="bench", validate=False).user
    session = services.create_session(user=user, title="bench")
    rng = random.Random(11)
    model = {"provider": "offline", "model": "echo"}

    def turn() -> int:
        """One turn's writes, as the runtime makes them; returns its raw text bytes."""
        user_text = prose(rng, 80)
        reply = prose(rng, 400)
        user_id, assistant_id = new_message_id(), new_message_id()
        services.update_message(
            session=session, info={"id": user_id, "role": "user", "agent": "build", "model": model}
        )
        services.update_part(
            session=session, part={"message_id": user_id, "type": "text", "text": user_text}
        )
        services.update_message(
            session=session,
            info={
                "id": assistant_id,
                "role": "assistant",
                "parent_id": user_id,
                "agent": "build",
                "model": model,
            },
        )
        snapshot = f"{rng.getrandbits(160):040x}"
        services.update_part(
            session=session,
            part={"message_id": assistant_id, "type": "step-start", "snapshot": snapshot},
        )
        services.update_part(
            session=session, part={"message_id": assistant_id, "type": "text", "text": reply}
        )
        tokens = {"input": 900, "output": 110, "reasoning": 0, "cache_read": 0, "cache_write": 0}
        services.update_part(
            session=session,
            part={
                "message_id": assistant_id,
                "type": "step-finish",
                "reason": "stop",
                "snapshot": snapshot,
                "tokens": tokens,
                "cost": 0.0012,
            },
        )
        services.update_message(
            session=session,
            info={
                "id": assistant_id,
                "tokens": tokens,
                "cost": 0.0012,
                "finish": "stop",
                "completed_at": "2026-12-01T03:00:00.000Z",
            },
        )
        return len(user_text.encode()) + len(reply.encode())

    baseline = sizes(connection)
    rows = []
    done = raw = 0
    for n in sorted(turns):
        while done < n:
            raw += turn()
            done += 1
        if vacuum:
            with connection.cursor() as cursor:
                cursor.execute("VACUUM")
        measured = sizes(connection)
        grown = {k: v - baseline.get(k, 0) for k, v in measured.items()}
        rows.append({"turns": n, "raw_per_turn": raw / n, "bytes": grown})
    columns = event_columns(connection)
    plans = explain(connection, session.pk) if explain_plans else {}
    if engine == "postgres":
        connection.close()
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as admin:
            # FORCE: the settings' connection pool still holds connections to it.
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    return {
        "engine": engine,
        "rows": rows,
        "columns": {k: v / done for k, v in columns.items()},
        "plans": plans,
    }


def explain(connection: Any, session_id: str) -> dict[str, str]:
    """The plan of one query per index of the store (the reads of ``sessions.sql``,
    ``selectors`` and ``snapshots`` that the index serves), on the grown database."""
    from sessions import sql
    from sessions.models import Message, Part

    message_id = Message.objects.filter(session_id=session_id).order_by("-id")[0].pk
    part_id = Part.objects.filter(session_id=session_id).order_by("-id")[0].pk
    e, m, p = sql.EVENT, sql.MESSAGE, sql.PART
    postgres = connection.vendor == "postgresql"
    newest = f"SELECT seq, hash FROM {e} WHERE session_id = %s ORDER BY seq DESC LIMIT 1"
    queries = {
        "the log's head (read_head): events (session, seq)": (newest, [session_id]),
        "a row's data (the projection's join): events (session, seq)": (
            f"SELECT e.data FROM {p} o JOIN {e} e ON e.session_id = o.session_id "
            "AND e.seq = o.seq WHERE o.id = %s",
            [part_id],
        ),
        "the context events (context_updates): sessionevent_context": (
            f"SELECT c.data FROM {e} c WHERE c.session_id = %s AND c.tenant_id = 1 "
            "AND c.type IN ('context.updated', 'session.compacted') "
            "AND c.type = 'context.updated' ORDER BY c.seq",
            [session_id],
        ),
        "a message by id (read_head): message pkey": (
            f"SELECT session_id, seq FROM {m} WHERE id = %s",
            [message_id],
        ),
        "a history page (message_page): message_session_id": (
            f"SELECT id, seq FROM {m} WHERE session_id = %s AND tenant_id = 1 "
            "ORDER BY id DESC LIMIT 51",
            [session_id],
        ),
        "a part by id (read_head): part pkey": (
            f"SELECT session_id, seq FROM {p} WHERE id = %s",
            [part_id],
        ),
        "a message's parts (read_messages, with_parts): part_message_id": (
            f"SELECT id, seq FROM {p} WHERE tenant_id = 1 AND message_id IN (%s) "
            "ORDER BY message_id, id",
            [message_id],
        ),
        "the newest step-finish (last_step_tokens): part_session_id": (
            f"SELECT seq FROM {p} WHERE tenant_id = 1 AND session_id = %s "
            "AND type = 'step-finish' ORDER BY id DESC LIMIT 1",
            [session_id],
        ),
        "a snapshot (snapshots.read): contextsnapshot pkey": (
            "SELECT seq FROM forge_sessions_contextsnapshot WHERE session_id = %s "
            "AND tenant_id = 1",
            [session_id],
        ),
    }
    prefix = "EXPLAIN (COSTS OFF) " if postgres else "EXPLAIN QUERY PLAN "
    plans: dict[str, str] = {}
    with connection.cursor() as cursor:
        if postgres:
            cursor.execute("ANALYZE")
        for name, (query, params) in queries.items():
            cursor.execute(prefix + query, params)
            rows = cursor.fetchall()
            plans[name] = " / ".join(str(r[0] if postgres else r[-1]).strip() for r in rows)
    return plans


def event_columns(connection: Any) -> dict[str, int]:
    """Bytes of each column of the events table, summed over its rows (values only: no
    row headers, no page slack)."""
    names = ["id", "tenant_id", "session_id", "seq", "type", "at", "data", "hash"]
    size = "pg_column_size({})" if connection.vendor == "postgresql" else "length(CAST({} AS BLOB))"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT "
            + ", ".join(f"SUM({size.format(n)})" for n in names)
            + " FROM forge_sessions_sessionevent"
        )
        return dict(zip(names, (int(v or 0) for v in cursor.fetchone()), strict=True))


def sizes(connection: Any) -> dict[str, int]:
    """Bytes per relation of the session store, named ``table``, ``table:index`` or ``fts``,
    plus ``wal`` (SQLite only)."""
    result: dict[str, int] = {}
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            path = connection.settings_dict["NAME"]
            wal = Path(f"{path}-wal")
            result["wal"] = wal.stat().st_size if wal.exists() else 0
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cursor.execute("SELECT name, tbl_name, type FROM sqlite_master")
            owners = {name: (table, kind) for name, table, kind in cursor.fetchall()}
            cursor.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
            for name, size in cursor.fetchall():
                table, kind = owners.get(name, (name, "table"))
                if table.startswith("forge_sessions_part_fts"):
                    key = f"fts:{table}"
                elif table not in TABLES:
                    continue
                else:
                    key = TABLES[table] if kind == "table" else f"{TABLES[table]}:{name}"
                result[key] = result.get(key, 0) + size
            return result
        cursor.execute(
            "SELECT c.relname, t.relname, c.relkind, "
            "CASE WHEN c.relkind = 'i' THEN pg_relation_size(c.oid) "
            "ELSE pg_table_size(c.oid) END "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_index i ON i.indexrelid = c.oid "
            "LEFT JOIN pg_class t ON t.oid = coalesce(i.indrelid, c.oid) "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')"
        )
        for name, table, kind, size in cursor.fetchall():
            if table not in TABLES:
                continue
            key = TABLES[table] if kind == "r" else f"{TABLES[table]}:{name}"
            if "search" in name:  # the full-text GIN index: the FTS column
                key = f"fts:{name}"
            result[key] = result.get(key, 0) + int(size)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", default="100,400,1600", help="N, comma-separated")
    parser.add_argument("--detail", action="store_true", help="one row per relation, per column")
    parser.add_argument(
        "--vacuum", action="store_true", help="VACUUM before each measurement (steady state)"
    )
    parser.add_argument(
        "--explain", action="store_true", help="the plan of one query per index, at the end"
    )
    engine_arguments(parser)
    args = parser.parse_args()
    turns = [int(n) for n in args.turns.split(",")]
    if args.worker:
        result = worker(args.worker, turns, args.postgres_url, args.vacuum, args.explain)
        print(json.dumps(result))
        return
    results = per_engine(__file__, args.engines, sys.argv[1:])
    print(
        "bytes on disk per turn (growth over the empty database / N), ratio to the raw "
        "text of a turn; one session, the runtime's write pattern, one transaction per write"
    )
    groups: list[tuple[str, Any]] = [
        ("events", lambda b: b.get("events", 0)),
        ("events idx", lambda b: _sum(b, "events:")),
        ("message+part", lambda b: b.get("message", 0) + b.get("part", 0)),
        ("their idx", lambda b: _sum(b, "message:") + _sum(b, "part:")),
        ("FTS / GIN", lambda b: _sum(b, "fts:")),
    ]

    def total(b: dict[str, int]) -> int:
        return sum(v for k, v in b.items() if k != "wal")

    header = ["engine", "N", "raw B/turn", "total B/turn", "x raw"]
    header += [name for name, _ in groups] + ["WAL file KB"]
    table = []
    for r in results:
        for row in r["rows"]:
            n, raw, b = row["turns"], row["raw_per_turn"], row["bytes"]
            cells = [r["engine"], str(n), f"{raw:.0f}", f"{total(b) / n:.0f}"]
            cells.append(f"{total(b) / n / raw:.1f}")
            cells += [f"{get(b) / n:.0f} ({get(b) / n / raw:.1f}x)" for _, get in groups]
            cells.append(f"{b['wal'] / 1024:.0f}" if "wal" in b else "n/a")
            table.append(cells)
    print_table(header, table)
    if args.detail:
        print("\nper relation, bytes per turn at the largest N")
        detail = []
        for r in results:
            row = r["rows"][-1]
            n, raw = row["turns"], row["raw_per_turn"]
            for name, size in sorted(row["bytes"].items()):
                if name == "wal":
                    continue
                detail.append([r["engine"], name, f"{size / n:.0f}", f"{size / n / raw:.2f}"])
        print_table(["engine", "relation", "B/turn", "x raw"], detail)
        print("\nthe events table's values by column, bytes per turn (no row or page overhead)")
        names = list(results[0]["columns"])
        print_table(
            ["engine", *names],
            [[r["engine"], *(f"{r['columns'][n]:.0f}" for n in names)] for r in results],
        )
    if args.explain:
        _print_plans(results)


def _print_plans(results: list[dict[str, Any]]) -> None:
    print("\nwhich read each index serves (EXPLAIN at the largest N)")
    print_table(
        ["engine", "query: index", "plan"],
        [[r["engine"], q, plan] for r in results for q, plan in r.get("plans", {}).items()],
    )


def _sum(sizes: dict[str, int], prefix: str) -> int:
    return sum(v for k, v in sizes.items() if k.startswith(prefix))


if __name__ == "__main__":
    main()
