"""The append engine: one event after the log's head, projected, published after commit.

Sequence allocation: an event's ``seq`` is the newest event's plus one, and
``UNIQUE(session, seq)`` makes two writers that read the same head collide
instead of forking the log. Writers either queue on the session row's lock
(``SELECT … FOR UPDATE`` on PostgreSQL; ``BEGIN IMMEDIATE`` on SQLite) and read
the head after it, or, on PostgreSQL outside a transaction, read without a
lock and retry on collision (see ``commit``). No duplicate, no gap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction

from .. import bus, projector, sql
from ..exceptions import InvalidEvent, InvalidMessage, InvalidPart, NotFound
from ..frames import event_frame
from ..ids import is_valid_id, new_event_id
from ..log import (
    canonical_body_text,
    canonical_json_without,
    chain_hash_text,
    event_body,
    format_time,
    now_ms,
)
from ..models import Session, SessionEvent, row_held_keys
from ..storable import (
    may_hold_unstored_number,
    nul_path,
    surrogate_path,
    unstored_number,
    with_stored_numbers,
)

Build = Callable[[sql.Head], tuple[str, dict[str, Any]]]

# How many times a write may find its seq taken by a concurrent writer before
# it falls back to locking the session row.
OPTIMISTIC_ATTEMPTS = 1


@dataclass(frozen=True)
class _Prepared:
    statements: list[sql.Statement]
    event: SessionEvent
    frame: dict[str, Any]


# How canonical JSON writes U+0000 (six characters: backslash, "u0000"). A text that
# holds those six characters itself is written with the backslash doubled, which holds
# them too: the walk then finds no NUL.
_NUL_ESCAPE = "\\u0000"
_REFUSALS: dict[str, tuple[str, type[InvalidEvent | InvalidMessage | InvalidPart]]] = {
    "part.updated": ("part", InvalidPart),
    "message.updated": ("info", InvalidMessage),
}


def _refuse_nul(event_type: str, data: dict[str, Any]) -> None:
    """The log's one rule for NUL: no string of an event's data (key or value) holds
    U+0000, on either stack. PostgreSQL cannot store it in ``jsonb``, so without
    this rule a NUL reached the database as a ``DataError``; SQLite refuses it too,
    so a log reads the same everywhere. Raised with the write's own error (its
    ``code``, status 400), before anything is written."""
    name, error = _REFUSALS.get(event_type, ("data", InvalidEvent))
    where = nul_path(data, name)
    if where is not None:
        raise error(f"{where}: holds a NUL character (U+0000), which the log does not store")


def _refuse_surrogate(event_type: str, data: dict[str, Any]) -> None:
    """The log's rule for lone UTF-16 surrogates (U+D800-U+DFFF), which a JSON string
    can carry (``"\\ud800"``) and no UTF-8 text can: refused like NUL, with the write's
    own error (status 400), before anything is written. Without it the event's hash
    raised ``UnicodeEncodeError`` (a 500, or a reply left open for ever). What a model
    says has them replaced with U+FFFD before it gets here (``providers.events``)."""
    name, error = _REFUSALS.get(event_type, ("data", InvalidEvent))
    where = surrogate_path(data, name)
    if where is not None:
        raise error(
            f"{where}: holds a lone surrogate (U+D800-U+DFFF), which the log does not store"
        )


def _prepare(
    dialect: sql.Dialect, session: Session, head: sql.Head, event_type: str, data: dict[str, Any]
) -> _Prepared:
    """The statements that append ``data`` after ``head`` and project it."""
    seq = head.seq + 1
    at = now_ms()
    at_text = format_time(at)
    event_id = new_event_id()
    try:
        # Stored without what the row holds (models.row_held_keys), at one serialisation.
        data_json, stored_json = canonical_json_without(
            data, row_held_keys(event_type, data, session.pk, at_text)
        )
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"event data is not representable as JSON: {exc}") from None
    if may_hold_unstored_number(data_json) and unstored_number(data) is not None:
        # A float PostgreSQL would read back otherwise (a model's 1e20): logged as it
        # reads back, on both engines, so the hash holds (rare: only then walked).
        data = with_stored_numbers(data)
        data_json, stored_json = canonical_json_without(
            data, row_held_keys(event_type, data, session.pk, at_text)
        )
    if _NUL_ESCAPE in data_json:  # rare: only then is the data walked
        _refuse_nul(event_type, data)
    body_text = canonical_body_text(
        seq=seq,
        id=event_id,
        session_id=session.pk,
        type=event_type,
        at=at_text,
        data_json=data_json,
    )
    try:
        event_hash = chain_hash_text(head.hash, body_text)
    except UnicodeEncodeError:  # a lone surrogate: found only when hashing, at no cost
        _refuse_surrogate(event_type, data)
        raise
    db_at = dialect.adapt_datetime(at)
    statements = [
        sql.insert_event(
            dialect,
            event_id=event_id,
            tenant_id=session.tenant_id,
            session_id=session.pk,
            seq=seq,
            type=event_type,
            at=db_at,
            data_json=stored_json,
            event_hash=event_hash,
        ),
        *projector.statements(
            dialect,
            tenant_id=session.tenant_id,
            session_id=session.pk,
            seq=seq,
            type=event_type,
            data=data,
            data_json=data_json,
            at=db_at,
        ),
    ]
    event = SessionEvent(
        id=event_id,
        tenant_id=session.tenant_id,
        session_id=session.pk,
        seq=seq,
        type=event_type,
        at=at,
        data=data,
        hash=event_hash,
    )
    event._state.adding = False
    event._state.db = dialect.alias
    frame = event_frame(
        event_body(
            seq=seq, id=event_id, session_id=session.pk, type=event_type, at=at_text, data=data
        )
    )
    return _Prepared(statements=statements, event=event, frame=frame)


def commit(
    session: Session,
    build: Build,
    *,
    table: str | None = None,
    obj_id: Any = None,
    parent_message_id: Any = None,
) -> SessionEvent:
    """Append the one event that ``build`` makes from the log's head, atomically.

    ``build`` validates against the head (and the stored message or part it
    carries) and returns ``(event_type, data)``, or raises: then nothing is
    written. Two ways to commit, with the same result:

    * on PostgreSQL, outside any caller's transaction: read the head without a
      lock, then send the session lock and every write as one multi-statement
      query, which PostgreSQL runs as one implicit transaction (two round trips
      in all). If a concurrent writer appended since the read, the insert hits
      ``UNIQUE(session, seq)``, nothing is written, and the write is re-read
      and retried; after ``OPTIMISTIC_ATTEMPTS`` it takes the other way;
    * otherwise: in a transaction, lock the session row, read, write. Events
      are published once the outermost transaction commits.

    Every writer takes the session lock before inserting anything, so a
    writer holding it never loses its seq and writers never deadlock.
    """
    connection = transaction.get_connection()
    lookup = {
        "table": table,
        "obj_id": obj_id if is_valid_id(obj_id) else None,
        "parent_message_id": parent_message_id if is_valid_id(parent_message_id) else None,
    }
    if sql.can_batch_outside_transaction(connection):
        for _ in range(OPTIMISTIC_ATTEMPTS):
            with connection.cursor() as cursor:
                dialect = sql.Dialect(cursor)
                head = _head(
                    sql.read_head(
                        cursor, dialect, session.pk, tenant_id=session.tenant_id, **lookup
                    ),
                    session,
                )
                prepared = _prepare(dialect, session, head, *build(head))
                lock = sql.lock_statement(dialect, session.pk, session.tenant_id)
                try:
                    sql.run(cursor, dialect, [lock, *prepared.statements])
                except IntegrityError as exc:
                    if sql.is_seq_conflict(exc):
                        continue
                    raise
            _advance(session, prepared.event)
            bus.publish_after_commit(session.pk, prepared.frame)
            return prepared.event
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        dialect = sql.Dialect(cursor)
        if not sql.lock_session(cursor, dialect, session.pk, session.tenant_id):
            raise NotFound(f"session {session.pk!r} does not exist")
        # A statement after the lock: under READ COMMITTED it sees the events
        # that the writer we may have waited for committed.
        head = _head(
            sql.read_head(cursor, dialect, session.pk, tenant_id=session.tenant_id, **lookup),
            session,
        )
        prepared = _prepare(dialect, session, head, *build(head))
        sql.run(cursor, dialect, prepared.statements)
        _advance(session, prepared.event)
        transaction.on_commit(
            partial(bus.publish_after_commit, session.pk, prepared.frame), using=connection.alias
        )
    return prepared.event


def _head(head: sql.Head | None, session: Session) -> sql.Head:
    if head is None:
        raise NotFound(f"session {session.pk!r} does not exist")
    return head


def _advance(session: Session, event: SessionEvent) -> None:
    """Keep the caller's Session instance in step with what the event changed."""
    if not event.type.startswith("part."):
        session.updated_at = event.at
