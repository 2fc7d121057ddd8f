"""Several writes to one session's log as one unit: :func:`append_batch`.

A reply's step writes a handful of events that belong together (its finished
parts, the step-finish, the message update). Appending them one by one costs
a transaction, a session lock and a head read each; a batch pays those once.

What does not change, whichever way events arrive: each event is its own row
with its own ``seq`` (the head's plus one, gap-free) and its own link in the
hash chain; the projections are updated by the same statements; every event's
frame is published, in log order, only once the transaction commits. A batch
validates each write exactly as the single entry does (the same
:class:`~.writes.Write`), against the head as the writes before it in the
batch leave it, so a part may name a message created earlier in the same
batch. One refused write refuses the batch: nothing is written, nothing is
published, and the error is the one the single entry raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.db.backends.utils import CursorWrapper

from .. import bus, sql
from ..exceptions import InvalidEvent, NotFound
from ..models import Session, SessionEvent
from .append import OPTIMISTIC_ATTEMPTS, _advance, _prepare, _Prepared
from .writes import Write

__all__ = ["append_batch"]


class _Rows:
    """The messages and parts a batch's checks see: the stored rows it read, as the
    batch's own earlier writes changed them (the projection, ahead of the database)."""

    def __init__(
        self,
        session_id: str,
        messages: dict[str, sql.Stored],
        parts: dict[str, sql.Stored],
    ) -> None:
        self.session_id = session_id
        self.stored_messages = messages
        self.stored_parts = parts
        self.messages: dict[str, sql.Stored | None] = {}  # None: removed in this batch
        self.parts: dict[str, sql.Stored | None] = {}
        self.removed_messages: set[str] = set()

    def message(self, message_id: str | None) -> sql.Stored | None:
        if message_id is None:
            return None
        if message_id in self.messages:
            return self.messages[message_id]
        return self.stored_messages.get(message_id)

    def part(self, part_id: str | None) -> sql.Stored | None:
        if part_id is None:
            return None
        if part_id in self.parts:
            return self.parts[part_id]
        stored = self.stored_parts.get(part_id)
        if (
            stored is not None
            and stored.owner == self.session_id
            and stored.data.get("message_id") in self.removed_messages
        ):
            return None  # its message was removed earlier in the batch, and it with it
        return stored

    def head(self, write: Write, after: sql.Head) -> sql.Head:
        """The head ``write`` is built against: ``after`` and the rows it looks up."""
        found = None
        if write.table == sql.MESSAGE:
            found = self.message(write.obj_id)
        elif write.table == sql.PART:
            found = self.part(write.obj_id)
        parent = self.message(write.parent_message_id)
        return sql.Head(
            seq=after.seq,
            hash=after.hash,
            owner=found.owner if found else None,
            data=found.data if found else None,
            parent_owner=parent.owner if parent else None,
        )

    def apply(self, event: SessionEvent) -> None:
        data = event.data
        if event.type == "message.updated":
            self.messages[data["id"]] = sql.Stored(self.session_id, data)
        elif event.type == "part.updated":
            self.parts[data["id"]] = sql.Stored(self.session_id, data)
        elif event.type == "part.removed":
            self.parts[data["part_id"]] = None
        elif event.type == "message.removed":
            message_id = data["message_id"]
            self.messages[message_id] = None
            self.removed_messages.add(message_id)
            for part_id, row in self.parts.items():
                if row is not None and row.data["message_id"] == message_id:
                    self.parts[part_id] = None


def _lookups(writes: Sequence[Write]) -> tuple[list[str], list[str]]:
    """The message and part ids whose stored rows the writes' checks need."""
    messages: dict[str, None] = {}
    parts: dict[str, None] = {}
    for write in writes:
        if write.obj_id is not None:
            if write.table == sql.MESSAGE:
                messages[write.obj_id] = None
            elif write.table == sql.PART:
                parts[write.obj_id] = None
        if write.parent_message_id is not None:
            messages[write.parent_message_id] = None
    return list(messages), list(parts)


def _prepare_all(
    cursor: CursorWrapper,
    dialect: sql.Dialect,
    session: Session,
    writes: Sequence[Write],
) -> list[_Prepared]:
    """Read the head once, then build and prepare every write after the one before it.
    Raises the first write's refusal; nothing has been written then."""
    message_ids, part_ids = _lookups(writes)
    read = sql.read_batch_head(
        cursor,
        dialect,
        session.pk,
        tenant_id=session.tenant_id,
        message_ids=message_ids,
        part_ids=part_ids,
    )
    if read is None:
        raise NotFound(f"session {session.pk!r} does not exist")
    head, messages, parts = read
    rows = _Rows(session.pk, messages, parts)
    prepared: list[_Prepared] = []
    for write in writes:
        at = rows.head(write, head)
        one = _prepare(dialect, session, at, *write.build(session, at))
        rows.apply(one.event)
        head = sql.Head(seq=one.event.seq, hash=one.event.hash)
        prepared.append(one)
    return prepared


def _statements(prepared: Sequence[_Prepared]) -> list[sql.Statement]:
    """The batch's statements, in order, with the session's ``updated_at`` set once, at
    the end: by the last write that sets it (the newest time), not once per message
    write. Nothing in a batch reads ``updated_at``; at the end, the touch leaves the
    batch's inserts one run (one multi-row statement per table on SQLite: ``sql.run``)."""
    statements = [statement for one in prepared for statement in one.statements]
    touches = [statement for statement in statements if statement[0] == sql.TOUCH]
    if not touches:
        return statements
    return [statement for statement in statements if statement[0] != sql.TOUCH] + touches[-1:]


def _publish_all(session_id: str, frames: list[dict[str, Any]]) -> None:
    bus.publish_many_after_commit(session_id, frames)


def append_batch(*, session: Session, writes: Sequence[Write]) -> list[SessionEvent]:
    """Append ``writes`` to the session's log, in order, in one transaction.

    Returns the events appended (in order; empty for no writes). Raises what the
    first refused write's single entry raises (``InvalidMessage``,
    ``InvalidPart``, ``InvalidEvent``, ``SessionMismatch``, ``NotFound``): then
    nothing is written or published. Commits the way ``append.commit`` does: on
    PostgreSQL outside a transaction, an unlocked read and one multi-statement
    query that retries on losing the race for its seqs; otherwise, in a
    transaction (the caller's, if any), under the session lock, publishing once
    the outermost transaction commits.
    """
    writes = list(writes)
    for write in writes:
        if not isinstance(write, Write):
            raise InvalidEvent(
                f"a batch holds writes (sessions.services.writes), not {type(write).__name__}"
            )
        write.check()
    if not writes:
        return []
    connection = transaction.get_connection()
    if sql.can_batch_outside_transaction(connection):
        for _ in range(OPTIMISTIC_ATTEMPTS):
            with connection.cursor() as cursor:
                dialect = sql.Dialect(cursor)
                prepared = _prepare_all(cursor, dialect, session, writes)
                statements = [
                    sql.lock_statement(dialect, session.pk, session.tenant_id),
                    *_statements(prepared),
                ]
                try:
                    sql.run(cursor, dialect, statements)
                except IntegrityError as exc:
                    if sql.is_seq_conflict(exc):
                        continue
                    raise
            for one in prepared:
                _advance(session, one.event)
            _publish_all(session.pk, [one.frame for one in prepared])
            return [one.event for one in prepared]
    if connection.in_atomic_block:
        # The caller's transaction: no savepoint of our own (two statements, two round
        # trips on PostgreSQL). The lock and the reads write nothing, and a refusal
        # raises before any write, so the caller's transaction is as it was; the
        # writes run in an atomic block without a savepoint, so a failure among them
        # dooms the caller's transaction (it can never commit half a batch).
        with connection.cursor() as cursor:
            dialect = sql.Dialect(cursor)
            if not sql.lock_session(cursor, dialect, session.pk, session.tenant_id):
                raise NotFound(f"session {session.pk!r} does not exist")
            prepared = _prepare_all(cursor, dialect, session, writes)
            with transaction.atomic(using=connection.alias, savepoint=False):
                sql.run(cursor, dialect, _statements(prepared))
        return _written(session, prepared, connection.alias)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        dialect = sql.Dialect(cursor)
        if not sql.lock_session(cursor, dialect, session.pk, session.tenant_id):
            raise NotFound(f"session {session.pk!r} does not exist")
        # Read after the lock: under READ COMMITTED it sees what the writer we may
        # have waited for committed.
        prepared = _prepare_all(cursor, dialect, session, writes)
        sql.run(cursor, dialect, _statements(prepared))
        return _written(session, prepared, connection.alias)


def _written(session: Session, prepared: list[_Prepared], alias: str) -> list[SessionEvent]:
    """Advance the session's head past the batch and publish its frames once the
    outermost transaction commits; the events appended."""
    for one in prepared:
        _advance(session, one.event)
    transaction.on_commit(
        partial(_publish_all, session.pk, [one.frame for one in prepared]), using=alias
    )
    return [one.event for one in prepared]
