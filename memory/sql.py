"""Hand-written SQL for a rolling's commit: the store's one hot path.

A sweep commits thousands of rollings, so the commit neither pays the ORM's
per-query compile cost nor a round trip per statement:

1. one statement locks the core row and reads, with it, the unit of the core's
   current memory session (``FOR NO KEY UPDATE [SKIP LOCKED]`` on PostgreSQL;
   on SQLite the transaction's ``BEGIN IMMEDIATE`` is the lock);
2. the writes — the unit (insert or advance its counters), the messages, the
   slice, the trimmed window, the core's counters — sent in one round trip on
   PostgreSQL (client-side binding allows several statements per execute) and
   one by one on SQLite.

Every value is a bound parameter; table and column names come from the models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.backends.utils import CursorWrapper

from .models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from .normalize import Msg

CORE = MemoryCore._meta.db_table
UNIT = MemoryUnit._meta.db_table
MESSAGE = MemoryMessage._meta.db_table
SLICE = MemorySlice._meta.db_table
WINDOW = DialogueMessage._meta.db_table
ROWS_PER_INSERT = 500

Statement = tuple[str, list[Any]]


class Dialect:
    """The few differences between SQLite and PostgreSQL on this path."""

    def __init__(self, cursor: CursorWrapper) -> None:
        db = cursor.db
        self.postgres = db.vendor == "postgresql"
        self.batch = self.postgres and not db.settings_dict["OPTIONS"].get("server_side_binding")
        self._adapt = db.ops.adapt_datetimefield_value

    def time(self, value: datetime) -> Any:
        return self._adapt(value)


@dataclass(frozen=True)
class CoreRow:
    """What a rolling's snapshot reads of the core (no lock)."""

    tenant_id: int
    user_id: int
    agent: str
    memory_session_id: str
    rolled_seq: int
    window_next_seq: int
    window_count: int
    last_interaction_at: datetime | None


ADVISORY_CLASS = 0x4D454D  # "MEM": the first key of the rolling claims' advisory locks
_CORE_COLUMNS = (
    "c.tenant_id, c.user_id, c.agent, c.memory_session_id, c.rolled_seq, c.window_next_seq, "
    "c.window_count, c.last_interaction_at"
)


def _aware(value: Any) -> datetime | None:
    """A time read by a raw cursor as UTC (SQLite gives naive times, PostgreSQL aware)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _core_row(row: Sequence[Any]) -> CoreRow:
    values = list(row)
    values[7] = _aware(values[7])
    return CoreRow(*values)


def read_core(cursor: CursorWrapper, core_id: str) -> CoreRow | None:
    cursor.execute(f"SELECT {_CORE_COLUMNS} FROM {CORE} c WHERE c.id = %s", [core_id])
    row = cursor.fetchone()
    return None if row is None else _core_row(row)


def claim_and_read(
    cursor: CursorWrapper, dialect: Dialect, core_id: str
) -> tuple[bool, CoreRow | None]:
    """Claim the core for this process and read it, in one statement.

    PostgreSQL: the claim is a session advisory lock (False if another process holds
    it), released by :func:`release` or by the server when the process dies. SQLite:
    always True (the commit's re-check alone keeps two rollers from rolling twice).
    """
    if not dialect.postgres:
        return True, read_core(cursor, core_id)
    cursor.execute(
        f"SELECT pg_try_advisory_lock(%s, hashtext(%s)), {_CORE_COLUMNS} "
        f"FROM (SELECT 1) x LEFT JOIN {CORE} c ON c.id = %s",
        [ADVISORY_CLASS, core_id, core_id],
    )
    held, *row = cursor.fetchone()
    return bool(held), None if row[0] is None else _core_row(row)


def claim_and_read_window(
    cursor: CursorWrapper, dialect: Dialect, core_id: str
) -> tuple[bool, CoreRow | None, list[tuple[int, Msg]] | None]:
    """:func:`claim_and_read`, and on PostgreSQL the window's messages not rolled yet
    (``seq >= rolled_seq``, oldest first, with their seq) in the same round trip: the
    caller keeps those below its cutoff. ``None`` for the window on SQLite (read it with
    :func:`read_window`: no round trip to save there).

    The two statements are two snapshots: the window may hold messages appended after
    the core row was read (their seq is at or past its ``window_next_seq``, which a
    cutoff never reaches), or fewer if another rolling trimmed it meanwhile (it could
    not claim the core, so only before the claim; the commit's re-check of
    ``rolled_seq`` skips such a core)."""
    if not dialect.batch:
        held, core = claim_and_read(cursor, dialect, core_id)
        return held, core, None
    cursor.execute(
        f"SELECT pg_try_advisory_lock(%s, hashtext(%s)), {_CORE_COLUMNS} "
        f"FROM (SELECT 1) x LEFT JOIN {CORE} c ON c.id = %s; "
        f"SELECT seq, role, text, at, session_id, message_id FROM {WINDOW} "
        f"WHERE core_id = %s AND seq >= (SELECT rolled_seq FROM {CORE} WHERE id = %s) "
        "ORDER BY seq",
        [ADVISORY_CLASS, core_id, core_id, core_id, core_id],
    )
    held, *row = cursor.fetchone()
    cursor.nextset()
    window = _window_rows(cursor.fetchall())
    return bool(held), None if row[0] is None else _core_row(row), window


def release(cursor: CursorWrapper, dialect: Dialect, core_id: str) -> None:
    if dialect.postgres:
        cursor.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", [ADVISORY_CLASS, core_id])


def release_many(cursor: CursorWrapper, dialect: Dialect, core_ids: Sequence[str]) -> None:
    """:func:`release` of several claims in one round trip (a sweep's group)."""
    if dialect.postgres and core_ids:
        cursor.execute(
            "SELECT count(pg_advisory_unlock(%s, hashtext(c))) FROM unnest(%s::text[]) c",
            [ADVISORY_CLASS, list(core_ids)],
        )


def read_window(cursor: CursorWrapper, core_id: str, start: int, end: int) -> list[tuple[int, Msg]]:
    """Window messages with ``start <= seq < end``, oldest first, with their seq."""
    cursor.execute(
        f"SELECT seq, role, text, at, session_id, message_id FROM {WINDOW} "
        "WHERE core_id = %s AND seq >= %s AND seq < %s ORDER BY seq",
        [core_id, start, end],
    )
    return _window_rows(cursor.fetchall())


def _window_rows(rows: Sequence[tuple[Any, ...]]) -> list[tuple[int, Msg]]:
    """``(seq, role, text, at, session_id, message_id)`` rows as ``(seq, Msg)``."""
    return [
        (
            int(seq),
            Msg(
                role=role,
                text=text,
                at=_aware(at) or datetime.now(UTC),
                session_id=sid,
                message_id=mid,
            ),
        )
        for seq, role, text, at, sid, mid in rows
    ]


@dataclass(frozen=True)
class Locked:
    """The core row as locked, with its current unit (if it has one yet)."""

    tenant_id: int
    rolled_seq: int
    memory_session_id: str
    window_next_seq: int
    window_count: int
    unit_id: str | None
    unit_message_count: int


SAVEPOINT = "memory_rolling"


def lock_core(
    cursor: CursorWrapper, dialect: Dialect, core_id: str, *, skip_locked: bool = False
) -> Locked | None:
    """Lock the core for this transaction; None if it is missing (or, with
    ``skip_locked`` on PostgreSQL, locked by another transaction)."""
    lock = ""
    if dialect.postgres:
        lock = " FOR NO KEY UPDATE OF c" + (" SKIP LOCKED" if skip_locked else "")
    cursor.execute(
        "SELECT c.tenant_id, c.rolled_seq, c.memory_session_id, c.window_next_seq, "
        f"c.window_count, u.id, u.message_count FROM {CORE} c LEFT JOIN {UNIT} u "
        "ON u.core_id = c.id AND u.memory_session_id = c.memory_session_id "
        f"WHERE c.id = %s{lock}",
        [core_id],
    )
    row = cursor.fetchone()
    if row is None:
        return None
    return Locked(
        tenant_id=row[0],
        rolled_seq=row[1],
        memory_session_id=row[2],
        window_next_seq=row[3],
        window_count=row[4],
        unit_id=row[5],
        unit_message_count=row[6] or 0,
    )


def lock_cores(cursor: CursorWrapper, core_ids: Sequence[str]) -> dict[str, Locked]:
    """PostgreSQL: :func:`lock_core` of several cores in one statement (``SKIP LOCKED``):
    the ones locked, by id; a core missing or locked by another transaction is absent."""
    cursor.execute(
        "SELECT c.id, c.tenant_id, c.rolled_seq, c.memory_session_id, c.window_next_seq, "
        f"c.window_count, u.id, u.message_count FROM {CORE} c LEFT JOIN {UNIT} u "
        "ON u.core_id = c.id AND u.memory_session_id = c.memory_session_id "
        "WHERE c.id = ANY(%s) ORDER BY c.id FOR NO KEY UPDATE OF c SKIP LOCKED",
        [list(core_ids)],
    )
    return {
        row[0]: Locked(
            tenant_id=row[1],
            rolled_seq=row[2],
            memory_session_id=row[3],
            window_next_seq=row[4],
            window_count=row[5],
            unit_id=row[6],
            unit_message_count=row[7] or 0,
        )
        for row in cursor.fetchall()
    }


def append_to_unit(
    dialect: Dialect,
    *,
    core_id: str,
    locked: Locked,
    unit_id: str,
    slice_id: str,
    messages: Sequence[Msg],
    summary: str,
    now: datetime,
) -> list[Statement]:
    """``updateMemoryUnit``: the messages appended at the end of the current unit (created
    as ``unit_id`` when the core has none for its memory session), and a slice covering
    exactly them."""
    at = dialect.time(now)
    start = locked.unit_message_count
    count = len(messages)
    statements: list[Statement]
    if locked.unit_id is None:
        statements = [
            (
                f"INSERT INTO {UNIT} (id, tenant_id, core_id, memory_session_id, created_at, "
                "updated_at, message_count, slice_count) VALUES (%s, %s, %s, %s, %s, %s, %s, 1)",
                [unit_id, locked.tenant_id, core_id, locked.memory_session_id, at, at, count],
            )
        ]
    else:
        unit_id = locked.unit_id
        statements = [
            (
                f"UPDATE {UNIT} SET message_count = message_count + %s, "
                "slice_count = slice_count + 1, updated_at = %s WHERE id = %s",
                [count, at, unit_id],
            )
        ]
    if dialect.postgres:
        # One statement of a fixed text and ~10 parameters whatever the count: psycopg
        # caches the parsing of a query only up to 50 parameters (a VALUES row per
        # message was re-parsed for every rolling).
        statements.append(
            (
                f'INSERT INTO {MESSAGE} (tenant_id, unit_id, "index", role, text, at, '
                "session_id, message_id) SELECT %s, %s, %s + m.n - 1, m.role, m.text, m.at, "
                "m.sid, m.mid FROM unnest(%s::text[], %s::text[], %s::timestamptz[], "
                "%s::text[], %s::text[]) WITH ORDINALITY AS m(role, text, at, sid, mid, n)",
                [
                    locked.tenant_id,
                    unit_id,
                    start,
                    [m.role for m in messages],
                    [m.text for m in messages],
                    [m.at for m in messages],
                    [m.session_id for m in messages],
                    [m.message_id for m in messages],
                ],
            )
        )
    for offset in range(0, 0 if dialect.postgres else count, ROWS_PER_INSERT):
        chunk = messages[offset : offset + ROWS_PER_INSERT]
        params: list[Any] = []
        for i, m in enumerate(chunk, start=start + offset):
            params += [
                locked.tenant_id, unit_id, i, m.role, m.text, dialect.time(m.at),
                m.session_id, m.message_id,
            ]  # fmt: skip
        statements.append(
            (
                f'INSERT INTO {MESSAGE} (tenant_id, unit_id, "index", role, text, at, '
                "session_id, message_id) VALUES "
                + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(chunk)),
                params,
            )
        )
    statements.append(
        (
            f"INSERT INTO {SLICE} (id, tenant_id, unit_id, start_index, end_index, summary, "
            "created_at, indexed) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [slice_id, locked.tenant_id, unit_id, start, start + count, summary, at, False],
        )
    )
    return statements


def advance_window(
    dialect: Dialect,
    *,
    core_id: str,
    rolled_seq: int,
    trimmed: int,
    memory_session_id: str,
    now: datetime,
) -> list[Statement]:
    """Record the rolling: every window message below ``rolled_seq`` (the rolling's
    cutoff: ``trimmed`` rows) leaves the window, so the window holds exactly the
    messages no unit holds (``rolled_seq == window_next_seq - window_count``)."""
    return [
        (f"DELETE FROM {WINDOW} WHERE core_id = %s AND seq < %s", [core_id, rolled_seq]),
        (
            f"UPDATE {CORE} SET rolled_seq = %s, window_count = window_count - %s, "
            "rolled_at = %s, memory_session_id = %s WHERE id = %s",
            [rolled_seq, trimmed, dialect.time(now), memory_session_id, core_id],
        ),
    ]


def savepoint() -> Statement:
    """The savepoint a grouped rolling's writes are sent within, as statements of their
    round trip (:func:`release_savepoint` closes it)."""
    return (f"SAVEPOINT {SAVEPOINT}", [])


def release_savepoint() -> Statement:
    return (f"RELEASE SAVEPOINT {SAVEPOINT}", [])


def rollback_savepoint(cursor: CursorWrapper) -> None:
    """Undo what was written since :func:`savepoint`, and drop it."""
    cursor.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}")


def run(cursor: CursorWrapper, dialect: Dialect, statements: list[Statement]) -> None:
    """Execute the statements in order, in one round trip where the driver allows it."""
    if dialect.batch and len(statements) > 1:
        cursor.execute(
            "; ".join(sql for sql, _ in statements), [p for _, ps in statements for p in ps]
        )
    else:
        for sql, params in statements:
            cursor.execute(sql, params)
