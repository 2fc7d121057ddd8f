"""All writes to the session store (CONTRACT §6).

Every function is keyword-only and atomic. A write appends exactly one event
to the session's log, projects it into messages and parts in the same
transaction, and publishes it to the session's channel-layer group after the
transaction commits. Bad input raises a ``ForgeError`` subclass before anything
is written: no event, no row, no publish.

Sequence allocation: an event's ``seq`` is the newest event's plus one, and
``UNIQUE(session, seq)`` makes two writers that read the same head collide
instead of forking the log. Writers either queue on the session row's lock
(``SELECT … FOR UPDATE`` on PostgreSQL; ``BEGIN IMMEDIATE`` on SQLite) and read
the head after it, or, on PostgreSQL outside a transaction, read without a
lock and retry on collision (see ``_commit``). No duplicate, no gap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction

from accounts.models import Tenant
from accounts.selectors import NoTenant, is_member, tenant_for_user

from . import bus, projector, sql
from .exceptions import (
    ForgeError,
    InvalidEvent,
    InvalidMessage,
    InvalidPart,
    LogIntegrityError,
    NotFound,
    SessionMismatch,
)
from .ids import is_valid_id, new_event_id, new_message_id, new_part_id
from .log import (
    canonical_body_text,
    canonical_json,
    chain_hash_text,
    event_body,
    format_time,
    now_ms,
)
from .models import Message, Part, Session, SessionEvent
from .projector import Projection, fold
from .shapes import ShapeError, normalize_message, normalize_part

TITLE_MAX = 255
AGENT_MAX = 64
_UNSET: Any = object()


class ImportConflict(ForgeError):
    """What an imported log would create exists already (HTTP 409)."""

    code = "conflict"


# Event types a caller may append directly; the others have their own service.
FREE_EVENT_TYPES = frozenset({"session.compacted", "context.updated"})


# --- the log --------------------------------------------------------------------

Build = Callable[[sql.Head], tuple[str, dict[str, Any]]]

# How many times a write may find its seq taken by a concurrent writer before
# it falls back to locking the session row.
OPTIMISTIC_ATTEMPTS = 1


@dataclass(frozen=True)
class _Prepared:
    statements: list[sql.Statement]
    event: SessionEvent
    frame: dict[str, Any]


def _prepare(
    dialect: sql.Dialect, session: Session, head: sql.Head, event_type: str, data: dict[str, Any]
) -> _Prepared:
    """The statements that append ``data`` after ``head`` and project it."""
    seq = head.seq + 1
    at = now_ms()
    at_text = format_time(at)
    event_id = new_event_id()
    try:
        data_json = canonical_json(data)
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"event data is not representable as JSON: {exc}") from None
    body_text = canonical_body_text(
        seq=seq,
        id=event_id,
        session_id=session.pk,
        type=event_type,
        at=at_text,
        data_json=data_json,
    )
    event_hash = chain_hash_text(head.hash, body_text)
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
            data_json=data_json,
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
    frame = {
        "kind": "event",
        **event_body(
            seq=seq, id=event_id, session_id=session.pk, type=event_type, at=at_text, data=data
        ),
    }
    return _Prepared(statements=statements, event=event, frame=frame)


def _commit(
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
                head = _head(sql.read_head(cursor, dialect, session.pk, **lookup), session)
                prepared = _prepare(dialect, session, head, *build(head))
                lock = sql.lock_statement(dialect, session.pk)
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
        if not sql.lock_session(cursor, dialect, session.pk):
            raise NotFound(f"session {session.pk!r} does not exist")
        # A statement after the lock: under READ COMMITTED it sees the events
        # that the writer we may have waited for committed.
        head = _head(sql.read_head(cursor, dialect, session.pk, **lookup), session)
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


def _existing(head: sql.Head, session: Session, kind: str, obj_id: Any) -> dict[str, Any] | None:
    """The stored message or part being updated; refuses another session's."""
    if head.owner is None:
        return None
    if head.owner != session.pk:
        raise SessionMismatch(f"{kind} {obj_id!r} belongs to another session")
    return head.data


def append_event(*, session: Session, type: str, data: Mapping[str, Any]) -> SessionEvent:
    """Append an event that projects to no rows (``session.compacted``, ``context.updated``)."""
    if type not in FREE_EVENT_TYPES:
        raise InvalidEvent(
            f"event type {type!r} cannot be appended directly; allowed: {sorted(FREE_EVENT_TYPES)}"
        )
    if not isinstance(data, Mapping):
        raise InvalidEvent("event data must be an object")
    return _commit(session, lambda head: (type, dict(data)))


# --- sessions -------------------------------------------------------------------


def session_info(session: Session) -> dict[str, Any]:
    """The session's wire shape, as logged in ``session.created`` / ``session.updated``."""
    return {
        "id": session.pk,
        "title": session.title,
        "agent": session.agent or None,
        "parent_id": session.parent_id,
        "created_at": format_time(session.created_at),
    }


def _clean_title(title: Any) -> str:
    if not isinstance(title, str):
        raise InvalidEvent("title must be a string")
    title = title.strip()
    if len(title) > TITLE_MAX:
        raise InvalidEvent(f"title is longer than {TITLE_MAX} characters")
    return title


def _clean_agent(agent: Any) -> str:
    if agent is None:
        return ""
    if not isinstance(agent, str) or len(agent) > AGENT_MAX:
        raise InvalidEvent(f"agent must be a name of at most {AGENT_MAX} characters")
    return agent


@transaction.atomic
def create_session(
    *,
    user: AbstractBaseUser,
    tenant: Tenant | None = None,
    title: str = "",
    agent: str | None = None,
    parent: Session | None = None,
) -> Session:
    """A new session owned by ``user`` in ``tenant`` (default: the user's own tenant)."""
    if tenant is None:
        try:
            tenant = tenant_for_user(user)
        except NoTenant as exc:
            raise SessionMismatch(str(exc)) from exc
    elif not is_member(user=user, tenant=tenant):
        raise SessionMismatch(f"user {user.get_username()!r} is not a member of tenant {tenant}")
    if parent is not None and parent.tenant_id != tenant.pk:
        raise SessionMismatch("a parent session must belong to the same tenant")
    session = Session.objects.create(
        tenant=tenant,
        user_id=user.pk,
        title=_clean_title(title),
        agent=_clean_agent(agent),
        parent=parent,
    )
    session_id = session.pk

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        if head.seq:
            raise InvalidEvent(f"session {session_id!r} already has a log")
        return "session.created", session_info(session)

    _commit(session, build)
    return session


def update_session(*, session: Session, title: Any = _UNSET, agent: Any = _UNSET) -> SessionEvent:
    """Rename a session or change its default agent (``session.updated``)."""
    new_title = session.title if title is _UNSET else _clean_title(title)
    new_agent = session.agent if agent is _UNSET else _clean_agent(agent)

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        session.title, session.agent = new_title, new_agent
        return "session.updated", session_info(session)

    return _commit(session, build)


@transaction.atomic
def delete_session(*, session: Session) -> None:
    """Delete a session with its whole log, messages and parts.

    The database refuses to delete single events; marking the session as
    ``deleting`` first is what lets the triggers allow it, inside this
    transaction only.
    """
    if not Session.objects.filter(pk=session.pk).update(deleting=True):
        raise NotFound(f"session {session.pk!r} does not exist")
    Part.objects.filter(session_id=session.pk).delete()
    Message.objects.filter(session_id=session.pk).delete()
    Session.objects.filter(pk=session.pk).delete()


# --- messages and parts ---------------------------------------------------------


def _id_of(obj: Any) -> Any:
    return obj.get("id") if isinstance(obj, Mapping) else None


def update_message(*, session: Session, info: Mapping[str, Any]) -> SessionEvent:
    """Create or replace a message (``message.updated``). Omitted fields keep their value."""
    message_id = _id_of(info)
    parent_id = info.get("parent_id") if isinstance(info, Mapping) else None

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        existing = _existing(head, session, "message", message_id)
        try:
            message = normalize_message(info, session_id=session.pk, existing=existing)
        except ShapeError as exc:
            raise InvalidMessage(str(exc)) from None
        new_parent = message.get("parent_id")
        # A parent that changed is the one ``info`` named, which the head looked up.
        changed = new_parent and new_parent != (existing or {}).get("parent_id")
        if changed and head.parent_owner != session.pk:
            raise InvalidMessage(f"info.parent_id: no message {new_parent!r} in this session")
        return "message.updated", message

    return _commit(
        session,
        build,
        table=sql.MESSAGE,
        obj_id=message_id,
        parent_message_id=parent_id,
    )


def update_part(*, session: Session, part: Mapping[str, Any]) -> SessionEvent:
    """Create or replace a part (``part.updated``). Omitted fields keep their value.

    Refuses: a message of another session, an unknown type, a shape that does
    not match the type, a type or message change, a tool state going backwards.
    """
    part_id = _id_of(part)
    message_id = part.get("message_id") if isinstance(part, Mapping) else None

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        existing = _existing(head, session, "part", part_id)
        try:
            normalized = normalize_part(part, session_id=session.pk, existing=existing)
        except ShapeError as exc:
            raise InvalidPart(str(exc)) from None
        if existing is None:
            if head.parent_owner is None:
                raise InvalidPart(f"part.message_id: no message {normalized['message_id']!r}")
            if head.parent_owner != session.pk:
                raise SessionMismatch(
                    f"part.message_id: message {normalized['message_id']!r} "
                    "belongs to another session"
                )
        return "part.updated", normalized

    return _commit(session, build, table=sql.PART, obj_id=part_id, parent_message_id=message_id)


def remove_part(*, session: Session, part_id: str) -> SessionEvent:
    """Remove a part from its message (``part.removed``)."""

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        if head.owner != session.pk or head.data is None:
            raise NotFound(f"no part {part_id!r} in this session")
        message_id = head.data["message_id"]
        return "part.removed", {
            "session_id": session.pk,
            "message_id": message_id,
            "part_id": part_id,
        }

    return _commit(session, build, table=sql.PART, obj_id=part_id)


def remove_message(*, session: Session, message_id: str) -> SessionEvent:
    """Remove a message and its parts (``message.removed``)."""

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        if head.owner != session.pk:
            raise NotFound(f"no message {message_id!r} in this session")
        return "message.removed", {"session_id": session.pk, "message_id": message_id}

    return _commit(session, build, table=sql.MESSAGE, obj_id=message_id)


# --- the bus only ---------------------------------------------------------------


def delta_frame(
    *, session: Session, message_id: str, part_id: str, field: str, offset: int, delta: str
) -> dict[str, Any]:
    """The ``part.delta`` frame; raises ``InvalidPart`` for a bad field, offset or delta."""
    if field != "text":
        raise InvalidPart(f"delta field must be 'text', got {field!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidPart(f"delta offset must be a non-negative integer, got {offset!r}")
    if not isinstance(delta, str):
        raise InvalidPart("delta must be a string")
    return {
        "kind": "delta",
        "type": "part.delta",
        "session_id": session.pk,
        "message_id": message_id,
        "part_id": part_id,
        "field": field,
        "offset": offset,
        "delta": delta,
    }


def publish_delta(
    *, session: Session, message_id: str, part_id: str, field: str, offset: int, delta: str
) -> None:
    """Publish a ``part.delta`` frame: the bus only, never the log."""
    frame = delta_frame(
        session=session,
        message_id=message_id,
        part_id=part_id,
        field=field,
        offset=offset,
        delta=delta,
    )
    bus.publish(session.pk, frame)


async def apublish_delta(
    *, session: Session, message_id: str, part_id: str, field: str, offset: int, delta: str
) -> None:
    """:func:`publish_delta` for async callers (the runtime's event loop)."""
    frame = delta_frame(
        session=session,
        message_id=message_id,
        part_id=part_id,
        field=field,
        offset=offset,
        delta=delta,
    )
    await bus.apublish(session.pk, frame)


# --- projections ----------------------------------------------------------------


@transaction.atomic
def rebuild_projection(*, session: Session) -> Projection:
    """Replace the session's messages and parts with what its log projects to."""
    if not _lock_session(session) or not Session.objects.filter(pk=session.pk).exists():
        raise NotFound(f"session {session.pk!r} does not exist")
    state = fold(
        SessionEvent.objects.filter(session=session).order_by("seq").iterator(chunk_size=2000)
    )
    Part.objects.filter(session=session).delete()
    Message.objects.filter(session=session).delete()
    Message.objects.bulk_create(
        [Message(id=message_id, **row) for message_id, row in state.messages.items()],
        batch_size=500,
    )
    Part.objects.bulk_create(
        [Part(id=part_id, **row) for part_id, row in state.parts.items()], batch_size=500
    )
    if state.session:
        Session.objects.filter(pk=session.pk).update(**state.session)
        session.title, session.agent = state.session["title"], state.session["agent"]
    return state


def _lock_session(session: Session) -> bool:
    """Lock the session row for the current transaction (writers to it wait)."""
    with transaction.get_connection().cursor() as cursor:
        return sql.lock_session(cursor, sql.Dialect(cursor), session.pk)


# --- fork and import ------------------------------------------------------------


@transaction.atomic
def fork_session(*, session: Session, user: AbstractBaseUser, before_message_id: str) -> Session:
    """A new session holding the history before ``before_message_id`` (new ids, same content)."""
    from . import selectors

    tenant = session.tenant
    selectors.get_message(tenant=tenant, session_id=session.pk, message_id=before_message_id)
    fork = create_session(
        user=user,
        tenant=tenant,
        title=f"{session.title or 'Session'} (fork)"[:TITLE_MAX],
        agent=session.agent or None,
    )
    context = selectors.context_updates(tenant=tenant, session=session)
    if context:
        blocks: dict[str, dict[str, Any]] = {}
        for data in context:
            for block in data.get("blocks", []):
                blocks[f"{block.get('kind')}:{block.get('key', '')}"] = block
        append_event(session=fork, type="context.updated", data={"blocks": list(blocks.values())})
    new_ids: dict[str, str] = {}
    for item in selectors.iter_history(tenant=tenant, session_id=session.pk):
        info = item["info"]
        if info["id"] >= before_message_id:
            break
        new_ids[info["id"]] = new_message_id()
        copy = {**info, "id": new_ids[info["id"]], "session_id": fork.pk}
        if copy.get("parent_id"):
            copy["parent_id"] = new_ids.get(copy["parent_id"])
        update_message(session=fork, info=copy)
        for part in item["parts"]:
            update_part(
                session=fork,
                part={
                    **part,
                    "id": new_part_id(),
                    "message_id": copy["id"],
                    "session_id": fork.pk,
                },
            )
    return fork


def parse_log(lines: Any) -> list[dict[str, Any]]:
    """Events from JSON Lines (an exported log); raises ``LogIntegrityError``."""
    import json

    events = []
    for number, line in enumerate(lines, start=1):
        if isinstance(line, bytes):
            line = line.decode("utf-8")
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise LogIntegrityError(f"line {number} is not JSON: {exc}") from None
        if not isinstance(event, dict):
            raise LogIntegrityError(f"line {number} is not an event object")
        events.append(event)
    return events


@transaction.atomic
def import_log(*, user: AbstractBaseUser, events: list[dict[str, Any]]) -> Session:
    """Recreate a session from its exported log, after verifying it, in the user's tenant.

    The session keeps its id and its events stay byte for byte what they were (so
    the hash chain still verifies); messages and parts are rebuilt from them.
    """
    from .log import parse_time, verify_chain

    if not events:
        raise LogIntegrityError("the log is empty")
    session_id = events[0].get("session_id")
    if not is_valid_id(session_id):
        raise LogIntegrityError("the first event names no session")
    problems = verify_chain(events, session_id=session_id)
    if problems:
        raise LogIntegrityError(
            f"the log does not verify at seq {problems[0].seq}: {problems[0].message}"
        )
    first = events[0]
    if first["type"] != "session.created" or first["data"].get("id") != session_id:
        raise LogIntegrityError("a log starts with its session.created event")
    if Session.objects.filter(pk=session_id).exists():
        raise ImportConflict(f"session {session_id} already exists here")
    message_ids = {e["data"]["id"] for e in events if e["type"] == "message.updated"}
    part_ids = {e["data"]["id"] for e in events if e["type"] == "part.updated"}
    if (
        Message.objects.filter(pk__in=message_ids).exists()
        or Part.objects.filter(pk__in=part_ids).exists()
    ):
        raise ImportConflict("messages or parts of this log already exist here")
    try:
        tenant = tenant_for_user(user)
    except NoTenant as exc:
        raise SessionMismatch(str(exc)) from exc
    info = first["data"]
    try:
        created = parse_time(info["created_at"])
        last = parse_time(events[-1]["at"])
    except (KeyError, ValueError) as exc:
        raise LogIntegrityError(f"a time does not parse: {exc}") from None
    session = Session.objects.create(
        id=session_id,
        tenant=tenant,
        user_id=user.pk,
        title=_clean_title(info.get("title") or ""),
        agent=_clean_agent(info.get("agent")),
        created_at=created,
        updated_at=last,
    )
    SessionEvent.objects.bulk_create(
        [
            SessionEvent(
                id=e["id"],
                tenant=tenant,
                session=session,
                seq=e["seq"],
                type=e["type"],
                at=parse_time(e["at"]),
                data=e["data"],
                hash=e["hash"],
            )
            for e in events
        ],
        batch_size=500,
    )
    rebuild_projection(session=session)
    return session
