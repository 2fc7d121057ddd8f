"""Hand-written SQL for appending to the log: the store's one hot path (what a turn
reads in plain SQL is in ``sessions.turn_sql``).

Every reply writes tens of events, so ``update_part`` must not pay the ORM's
per-query compile cost. An append is, on one cursor:

1. one statement that reads the log's head (its newest event, from the
   ``(session, seq)`` index) together with the message or part being updated
   and the message a new part names (after locking the session row when the
   write runs in a transaction; see ``services._commit``);
2. the writes (insert the event, upsert or delete projection rows), sent in
   one round trip on PostgreSQL (client-side binding allows several statements
   per execute) and one by one on SQLite.

The canonical JSON text is stored once, in the event; a projection row points
at the event that last wrote it by ``(session_id, seq)`` and has no data column
of its own (migration 0006): ``upsert_message`` / ``upsert_part`` take no
``data_json``, and ``read_head`` reads a stored row's data through that pointer.
Hashes are hex in Python and raw bytes in the database (migration 0008):
``insert_event`` and ``read_head`` convert.

Every statement names the session's tenant (``tenant_id = %s``, and joins on
``tenant_id`` between tables), so that under Citus each one is routed to the one
shard that holds the tenant (docs/deploy.md, "Citus"). On PostgreSQL a projection
row's key is ``(id, tenant_id)`` (``forge.migrations.0008_citus_keys``): the upserts
name that key there, and ``(id)`` on SQLite. An id is unique within its tenant.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .log import GENESIS_HASH
from .models import Message, Part, Session, SessionEvent, digest_hex, wire_data_sql

EVENT = SessionEvent._meta.db_table
SESSION = Session._meta.db_table
MESSAGE = Message._meta.db_table
PART = Part._meta.db_table

SEQ_CONSTRAINT = "sessionevent_session_seq"

Statement = tuple[str, list[Any]]


@dataclass(frozen=True)
class Head:
    """The log's head, read under the session lock, with what the write needs to check."""

    seq: int
    hash: str
    owner: str | None = None  # session of the message/part being updated; None: it is new
    data: dict[str, Any] | None = None  # its stored wire dict
    parent_owner: str | None = None  # session of the message a new part names


def _batches(db: BaseDatabaseWrapper) -> bool:
    """Whether one execute may carry several statements (psycopg's client-side binding)."""
    return db.vendor == "postgresql" and not db.settings_dict["OPTIONS"].get("server_side_binding")


class Dialect:
    """The few differences between SQLite and PostgreSQL on this path."""

    def __init__(self, cursor: CursorWrapper) -> None:
        db = cursor.db
        self.alias = db.alias
        self.postgres = db.vendor == "postgresql"
        self.batch = _batches(db)
        self.json = "CAST(%s AS jsonb)" if self.postgres else "%s"
        self.adapt_datetime = db.ops.adapt_datetimefield_value
        # A projection row's key in the database, which ON CONFLICT names.
        self.row_key = "id, tenant_id" if self.postgres else "id"


def can_batch_outside_transaction(db: BaseDatabaseWrapper) -> bool:
    """True when a multi-statement execute would run as its own implicit transaction:
    PostgreSQL with client-side binding, in autocommit, not inside ``atomic()``."""
    return _batches(db) and db.get_autocommit() and not db.in_atomic_block


def is_seq_conflict(exc: IntegrityError) -> bool:
    """The insert lost the race for its seq to a concurrent writer."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) == SEQ_CONSTRAINT


def lock_statement(dialect: Dialect, session_id: str, tenant_id: int) -> Statement:
    """Lock the session row until the transaction ends; every writer to a session takes
    this lock before inserting anything, so writers never deadlock.

    PostgreSQL: ``FOR NO KEY UPDATE``, which (unlike ``FOR UPDATE``) does not conflict
    with the ``FOR KEY SHARE`` locks of foreign-key checks. SQLite: every transaction
    is ``BEGIN IMMEDIATE``, which already holds the database's write lock.
    """
    lock = " FOR NO KEY UPDATE" if dialect.postgres else ""
    return (
        f"SELECT 1 FROM {SESSION} WHERE id = %s AND tenant_id = %s{lock}",
        [session_id, tenant_id],
    )


def lock_session(cursor: CursorWrapper, dialect: Dialect, session_id: str, tenant_id: int) -> bool:
    """Take :func:`lock_statement`'s lock; False if there is no such session on PostgreSQL.

    On SQLite the transaction's ``BEGIN IMMEDIATE`` is the lock, and nothing is run
    (a missing session shows when the head is read).
    """
    if not dialect.postgres:
        return True
    cursor.execute(*lock_statement(dialect, session_id, tenant_id))
    return cursor.fetchone() is not None


def share_session(cursor: CursorWrapper, dialect: Dialect, session_id: str, tenant_id: int) -> bool:
    """Hold the session row against its writers and its deletion until the transaction
    ends, without holding off other readers that take this lock (a fork of it, say);
    False if there is no such session.

    PostgreSQL: ``FOR SHARE``, which conflicts with :func:`lock_statement`'s ``FOR NO
    KEY UPDATE`` (every writer's, and the deletion's) but not with itself. SQLite:
    the transaction's ``BEGIN IMMEDIATE`` already excludes every writer.
    """
    lock = " FOR SHARE" if dialect.postgres else ""
    cursor.execute(
        f"SELECT 1 FROM {SESSION} WHERE id = %s AND tenant_id = %s{lock}", [session_id, tenant_id]
    )
    return cursor.fetchone() is not None


def read_head(
    cursor: CursorWrapper,
    dialect: Dialect,
    session_id: str,
    *,
    tenant_id: int,
    table: str | None = None,
    obj_id: str | None = None,
    parent_message_id: str | None = None,
) -> Head | None:
    """Read, in one statement, the log's head (its newest event), the stored message or
    part ``obj_id`` of ``table`` (if any), and the session of the message
    ``parent_message_id`` (if any). None if the session does not exist.
    """
    newest = (
        f"FROM {EVENT} e WHERE e.session_id = s.id AND e.tenant_id = s.tenant_id "
        "ORDER BY e.seq DESC LIMIT 1"
    )
    if dialect.postgres:  # a LATERAL join plans faster than two correlated subqueries
        columns = ["h.seq", "h.hash"]
        joins = [f"LEFT JOIN LATERAL (SELECT e.seq, e.hash {newest}) h ON true"]
    else:
        columns = [f"(SELECT e.seq {newest})", f"(SELECT e.hash {newest})"]
        joins = []
    params: list[Any] = []
    if table is not None:  # the row's data is its event's (see the module docstring)
        columns += ["o.session_id", wire_data_sql("od.", postgres=dialect.postgres)]
        joins.append(f"LEFT JOIN {table} o ON o.id = %s AND o.tenant_id = s.tenant_id")
        joins.append(
            f"LEFT JOIN {EVENT} od ON od.session_id = o.session_id AND od.seq = o.seq "
            "AND od.tenant_id = o.tenant_id"
        )
        params.append(obj_id)
    if parent_message_id is not None:
        columns.append("m.session_id")
        joins.append(f"LEFT JOIN {MESSAGE} m ON m.id = %s AND m.tenant_id = s.tenant_id")
        params.append(parent_message_id)
    params += [session_id, tenant_id]
    query = (
        f"SELECT {', '.join(columns)} FROM {SESSION} s {' '.join(joins)} "
        "WHERE s.id = %s AND s.tenant_id = %s"
    )
    cursor.execute(query, params)
    row = cursor.fetchone()
    if row is None:
        return None
    seq, last_hash, *rest = row
    owner = data = parent_owner = None
    if table is not None:
        owner, data, *rest = rest
        if isinstance(data, str):
            data = json.loads(data)
    if parent_message_id is not None:
        parent_owner = rest[0]
    return Head(
        seq=seq or 0,
        hash=digest_hex(last_hash) or GENESIS_HASH,
        owner=owner,
        data=data,
        parent_owner=parent_owner,
    )


@dataclass(frozen=True)
class Stored:
    """A stored message or part row, as a batch's checks see it."""

    owner: str  # its session
    data: dict[str, Any]  # its wire dict


def read_batch_head(
    cursor: CursorWrapper,
    dialect: Dialect,
    session_id: str,
    *,
    tenant_id: int,
    message_ids: list[str],
    part_ids: list[str],
) -> tuple[Head, dict[str, Stored], dict[str, Stored]] | None:
    """:func:`read_head` for a batch, in one statement: the log's head and every stored
    message of ``message_ids`` and part of ``part_ids`` (any session's; the caller
    refuses another session's). None if the session does not exist.
    """
    newest = (
        f"FROM {EVENT} e WHERE e.session_id = s.id AND e.tenant_id = s.tenant_id "
        "ORDER BY e.seq DESC LIMIT 1"
    )
    if dialect.postgres:
        columns = ["h.seq", "h.hash"]
        joins = f"LEFT JOIN LATERAL (SELECT e.seq, e.hash {newest}) h ON true"
        rows = "(SELECT json_agg(json_build_array(o.id, o.session_id, {})) FROM {{}} o {{}})"
    else:
        columns = [f"(SELECT e.seq {newest})", f"(SELECT e.hash {newest})"]
        joins = ""
        rows = (
            "(SELECT json_group_array(json_array(o.id, o.session_id, json({}))) FROM {{}} o {{}})"
        )
    rows = rows.format(wire_data_sql("od.", postgres=dialect.postgres))
    params: list[Any] = []
    for table, ids in ((MESSAGE, message_ids), (PART, part_ids)):
        if ids:
            # A row's data is its event's (see the module docstring), as in read_head.
            where = (
                f"JOIN {EVENT} od ON od.session_id = o.session_id AND od.seq = o.seq "
                "AND od.tenant_id = o.tenant_id "
                f"WHERE o.tenant_id = s.tenant_id AND o.id IN ({', '.join(['%s'] * len(ids))})"
            )
            columns.append(rows.format(table, where))
            params.extend(ids)
        else:
            columns.append("NULL")
    params += [session_id, tenant_id]
    cursor.execute(
        f"SELECT {', '.join(columns)} FROM {SESSION} s {joins} "
        "WHERE s.id = %s AND s.tenant_id = %s",
        params,
    )
    row = cursor.fetchone()
    if row is None:
        return None
    seq, last_hash, messages, parts = row
    head = Head(seq=seq or 0, hash=digest_hex(last_hash) or GENESIS_HASH)
    return head, _stored(messages), _stored(parts)


def _stored(rows: Any) -> dict[str, Stored]:
    if isinstance(rows, str):
        rows = json.loads(rows)
    return {row_id: Stored(owner, data) for row_id, owner, data in rows or ()}


def insert_event(
    dialect: Dialect,
    *,
    event_id: str,
    tenant_id: int,
    session_id: str,
    seq: int,
    type: str,
    at: Any,
    data_json: str,
    event_hash: str,
) -> Statement:
    """The event row; ``event_hash`` is hex and stored as its raw bytes (migration 0008)."""
    return (
        f"INSERT INTO {EVENT} (id, tenant_id, session_id, seq, type, at, data, hash) "
        f"VALUES (%s, %s, %s, %s, %s, %s, {dialect.json}, %s)",
        [event_id, tenant_id, session_id, seq, type, at, data_json, bytes.fromhex(event_hash)],
    )


TOUCH = f"UPDATE {SESSION} SET updated_at = %s WHERE id = %s AND tenant_id = %s"


def touch_session(*, session_id: str, tenant_id: int, at: Any) -> Statement:
    """Record activity on the session (its ``updated_at``)."""
    return (TOUCH, [at, session_id, tenant_id])


def upsert_message(
    dialect: Dialect, *, message_id: str, tenant_id: int, session_id: str, role: str, seq: int
) -> Statement:
    """Point the message row at the event ``seq`` that wrote it (its data is that event's)."""
    return (
        f"INSERT INTO {MESSAGE} (id, tenant_id, session_id, role, seq) "
        "VALUES (%s, %s, %s, %s, %s) "
        f"ON CONFLICT ({dialect.row_key}) DO UPDATE SET role = excluded.role, seq = excluded.seq",
        [message_id, tenant_id, session_id, role, seq],
    )


def upsert_part(
    dialect: Dialect,
    *,
    part_id: str,
    tenant_id: int,
    session_id: str,
    message_id: str,
    type: str,
    seq: int,
) -> Statement:
    """Point the part row at the event ``seq`` that wrote it (its data is that event's)."""
    return (
        f"INSERT INTO {PART} (id, tenant_id, session_id, message_id, type, seq) "
        "VALUES (%s, %s, %s, %s, %s, %s) "
        f"ON CONFLICT ({dialect.row_key}) DO UPDATE SET type = excluded.type, seq = excluded.seq",
        [part_id, tenant_id, session_id, message_id, type, seq],
    )


def delete_message(*, session_id: str, tenant_id: int, message_id: str) -> list[Statement]:
    where = "session_id = %s AND tenant_id = %s"
    return [
        (
            f"DELETE FROM {PART} WHERE {where} AND message_id = %s",
            [session_id, tenant_id, message_id],
        ),
        (f"DELETE FROM {MESSAGE} WHERE {where} AND id = %s", [session_id, tenant_id, message_id]),
    ]


def delete_part(*, session_id: str, tenant_id: int, part_id: str) -> Statement:
    return (
        f"DELETE FROM {PART} WHERE session_id = %s AND tenant_id = %s AND id = %s",
        [session_id, tenant_id, part_id],
    )


def set_session_info(
    *, session_id: str, tenant_id: int, title: str, agent: str, at: Any
) -> Statement:
    return (
        f"UPDATE {SESSION} SET title = %s, agent = %s, updated_at = %s "
        "WHERE id = %s AND tenant_id = %s",
        [title, agent, at, session_id, tenant_id],
    )


def part_in_status_exists(
    cursor: CursorWrapper,
    dialect: Dialect,
    *,
    tenant_id: int,
    session_id: str,
    type: str,
    status: str,
) -> bool:
    """Whether a part of ``type`` of the session is now in ``state.status`` (its row's
    event says so): one plain statement (index ``part_session_id``), no ORM compile,
    for checks that run before every turn and almost always find nothing."""
    status_of = (
        "e.data -> 'state' ->> 'status'"
        if dialect.postgres
        else ("json_extract(e.data, '$.state.status')")
    )
    cursor.execute(
        f"SELECT 1 FROM {PART} p JOIN {EVENT} e ON e.session_id = p.session_id AND e.seq = p.seq "
        "AND e.tenant_id = p.tenant_id "
        f"WHERE p.session_id = %s AND p.tenant_id = %s AND p.type = %s AND {status_of} = %s "
        "LIMIT 1",
        [session_id, tenant_id, type, status],
    )
    return cursor.fetchone() is not None


def run(cursor: CursorWrapper, dialect: Dialect, statements: list[Statement]) -> None:
    """Execute the statements in order, in one round trip where the driver allows it
    (PostgreSQL); on SQLite, a batch's rows of events, messages and parts as one
    multi-row ``INSERT`` per table (:func:`coalesced`)."""
    if dialect.batch and len(statements) > 1:
        cursor.execute(
            "; ".join(sql for sql, _ in statements), [p for _, ps in statements for p in ps]
        )
    else:
        for sql, params in coalesced(statements) if len(statements) > 1 else statements:
            cursor.execute(sql, params)


_ROW_TABLES = tuple(f"INSERT INTO {table} (" for table in (EVENT, MESSAGE, PART))
# Rows per multi-row statement: SQLite builds before 3.32 allow 999 parameters.
_MAX_PARAMETERS = 999


@functools.lru_cache(maxsize=64)
def _row_form(text: str) -> tuple[str, str, str] | None:
    """``(head, row, tail)`` of a one-row ``INSERT`` of an event, message or part
    (``head + row + tail == text``, ``row`` the parenthesized values), else None."""
    if not text.startswith(_ROW_TABLES):
        return None
    head, sep, rest = text.partition(" VALUES ")
    if not sep or not rest.startswith("("):
        return None
    depth = 0
    for end, char in enumerate(rest):
        depth += (char == "(") - (char == ")")
        if depth == 0:
            return head + sep, rest[: end + 1], rest[end + 1 :]
    return None


def coalesced(statements: list[Statement]) -> list[Statement]:
    """``statements`` with each run of event, message and part inserts (nothing else
    between them) sent as one multi-row ``INSERT`` per table: SQLite applies the rows
    one by one, in order, so ``ON CONFLICT`` and the parts' search triggers see what
    the single statements would. A run's tables go in the order they first appear in
    it: an event always before the projection rows that point at it (the search
    trigger reads the event; the foreign keys are deferred anyway). Not for PostgreSQL,
    which refuses a row updated twice by one ``INSERT … ON CONFLICT``."""
    out: list[Statement] = []
    run_rows: dict[str, list[list[Any]]] = {}  # text -> its rows' parameters, in order

    def flush() -> None:
        for text, rows in run_rows.items():
            form = _row_form(text)
            assert form is not None
            head, row, tail = form
            step = max(1, _MAX_PARAMETERS // max(1, len(rows[0])))
            for at in range(0, len(rows), step):
                chunk = rows[at : at + step]
                if len(chunk) == 1:
                    out.append((text, chunk[0]))
                else:
                    values = ", ".join([row] * len(chunk))
                    out.append((f"{head}{values}{tail}", [p for ps in chunk for p in ps]))
        run_rows.clear()

    for text, params in statements:
        if _row_form(text) is None:
            flush()
            out.append((text, params))
        else:
            run_rows.setdefault(text, []).append(params)
    flush()
    return out
