"""All reads of the session store. Every selector takes the tenant.

The reads of what the model sees (context events, the newest step's usage) live in
``selectors.context`` and are imported here, so that callers say ``selectors.X``.

An object of another tenant is indistinguishable from a missing one: both
raise ``NotFound``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection
from django.db.models import Q, QuerySet

from accounts.models import Tenant
from accounts.selectors import member

from .. import sql
from ..exceptions import InvalidCursor, NotFound
from ..ids import is_valid_id
from ..log import ChainProblem, event_body, format_time, log_header, verify_chain
from ..models import Message, Part, Session, SessionEvent, wire_data_sql
from ..projector import Projection, fold
from .context import (  # noqa: F401 - re-exported
    CONTEXT_TYPES,
    context_updates,
    last_compaction,
    last_step_tokens,
    placed_context_updates,
    progress_since_compaction,
)
from .copies import copy_origins, copy_sources, copy_through  # noqa: F401 - re-exported

PAGE_DEFAULT = 50
PAGE_MAX = 200
EVENTS_PAGE_MAX = 1000


def event_wire(event: SessionEvent, *, with_hash: bool = False) -> dict[str, Any]:
    """The durable event's wire shape ``{seq, id, session_id, type, at, data}`` (+ ``hash``)."""
    body = event_body(
        seq=event.seq,
        id=event.id,
        session_id=event.session_id,
        type=event.type,
        at=format_time(event.at),
        data=event.data,
    )
    if with_hash:
        body["hash"] = event.hash
    return body


def get_session(*, tenant: Tenant, session_id: str) -> Session:
    if not is_valid_id(session_id):
        raise NotFound(f"no session {session_id!r}")
    try:
        return Session.objects.select_related("tenant").get(tenant=tenant, pk=session_id)
    except Session.DoesNotExist:
        raise NotFound(f"no session {session_id!r}") from None


def get_chat_session(*, tenant: Tenant, chat_id: str) -> Session:
    """The tenant's session that ``chat_id`` names as a chat: the session with that id,
    else the one with that chat alias (``Session.chat_alias``). ``NotFound`` when the
    tenant has neither, whatever other tenants have."""
    if not is_valid_id(chat_id):
        raise NotFound(f"no chat {chat_id!r}")
    found = list(
        Session.objects.select_related("tenant")
        .filter(Q(pk=chat_id) | Q(chat_alias=chat_id), tenant=tenant)
        .order_by("pk")[:2]
    )
    if not found:
        raise NotFound(f"no chat {chat_id!r}")
    return next((session for session in found if session.pk == chat_id), found[0])


def list_sessions(*, tenant: Tenant) -> QuerySet[Session]:
    """The tenant's sessions, most recently active first."""
    return Session.objects.filter(tenant=tenant).order_by("-updated_at", "-id")


@dataclass(frozen=True)
class MessagePage:
    items: list[dict[str, Any]]  # [{"info": message, "parts": [part, …]}], oldest first
    next_before: str | None  # pass as ``before`` for the next (older) page; None at the start


def check_limit(limit: int, maximum: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidCursor(f"limit must be an integer from 1 to {maximum}")
    return limit


def message_page(
    *, tenant: Tenant, session_id: str, limit: int = PAGE_DEFAULT, before: str | None = None
) -> MessagePage:
    """One page of history: the newest ``limit`` messages older than ``before``.

    Pages go newest first; inside a page, messages are oldest first, each with
    its parts in creation order. Two queries per page, whatever its size.
    """
    check_limit(limit, PAGE_MAX)
    session = get_session(tenant=tenant, session_id=session_id)
    messages = Message.objects.filter(tenant=tenant, session=session)
    if before is not None:
        # A message id: the store's own (``msg_…``, a position whether or not that message
        # is still there) or one of the session's (an imported log's may differ).
        # Anything else was a position too ("zzz": the whole history, "prt_x": none).
        if not is_valid_id(before) or (
            not before.startswith("msg_") and not messages.filter(id=before).exists()
        ):
            raise InvalidCursor(f"before: {before!r} is not a message id")
        messages = messages.filter(id__lt=before)
    rows = list(messages.order_by("-id").values_list("id", "data")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    rows.reverse()
    return MessagePage(
        items=with_parts(tenant, session, rows), next_before=rows[0][0] if has_more else None
    )


def with_parts(
    tenant: Tenant, session: Session, rows: list[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """``[{"info", "parts"}]`` for message rows ``(id, data)``, in one query for all parts."""
    parts_by_message: dict[str, list[dict[str, Any]]] = {message_id: [] for message_id, _ in rows}
    if rows:
        # By message only: the messages are this session's already, and a session
        # filter would let SQLite's planner scan the session's every part instead of
        # seeking these messages' (index ``part_message_id``).
        part_rows = (
            Part.objects.filter(tenant=tenant, message_id__in=parts_by_message)
            .order_by("message_id", "id")
            .values_list("message_id", "data")
        )
        for message_id, data in part_rows:
            parts_by_message[message_id].append(data)
    return [{"info": data, "parts": parts_by_message[mid]} for mid, data in rows]


def iter_history(
    *, tenant: Tenant, session_id: str, batch: int = PAGE_MAX, since: str | None = None
) -> Iterator[dict[str, Any]]:
    """The whole history, oldest first, ``{"info", "parts"}`` each, read in batches
    (only the messages from id ``since`` on, when given: an indexed range read)."""
    session = get_session(tenant=tenant, session_id=session_id)
    after: str | None = None
    while True:
        messages = Message.objects.filter(tenant=tenant, session=session).order_by("id")
        if after is not None:
            messages = messages.filter(id__gt=after)
        elif since is not None:
            messages = messages.filter(id__gte=since)
        rows = list(messages.values_list("id", "data")[:batch])
        yield from with_parts(tenant, session, rows)
        if len(rows) < batch:
            return
        after = rows[-1][0]


def events_after(
    *, tenant: Tenant, session_id: str, after: int = 0, limit: int = EVENTS_PAGE_MAX
) -> list[dict[str, Any]]:
    """Wire events with ``seq > after``, oldest first, at most ``limit``."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidCursor("after must be a non-negative integer")
    check_limit(limit, EVENTS_PAGE_MAX)
    session = get_session(tenant=tenant, session_id=session_id)
    events = SessionEvent.objects.filter(tenant=tenant, session=session, seq__gt=after).order_by(
        "seq"
    )[:limit]
    return [event_wire(event) for event in events]


def iter_log(
    *, session: Session, with_hash: bool = True, using: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every wire event of a session the caller already holds (so tenant-checked), in order.
    ``using``: the database alias to read (a replica for an export); default: the router's."""
    events = (
        SessionEvent.objects.db_manager(using)
        .filter(tenant_id=session.tenant_id, session=session)
        .order_by("seq")
    )
    for event in events.iterator(chunk_size=2000):
        yield event_wire(event, with_hash=with_hash)


def export_lines(*, session: Session, using: str | None = None) -> Iterator[str]:
    """The session's export file, line by line: the header, then every event with its
    hash (JSON Lines). ``using``: the database alias to read, for every line."""
    head = (
        SessionEvent.objects.db_manager(using)
        .filter(tenant_id=session.tenant_id, session=session)
        .order_by("-seq")
        .values_list("seq", "hash")
        .first()
    )
    seq, head_hash = head or (0, "")
    header = log_header(session_id=session.pk, events=seq, head_hash=head_hash)
    yield json.dumps(header, separators=(",", ":")) + "\n"
    for event in iter_log(session=session, using=using):
        if event["seq"] > seq:  # written after the header was: the next export has it
            return
        # Keys sorted: the same file from either engine (jsonb reorders an object's keys).
        yield json.dumps(event, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n"


def stored_projection(*, tenant: Tenant, session: Session) -> Projection:
    """The projection rows as they are in the database, in ``projector.Projection`` form."""
    state = Projection(session={"title": session.title, "agent": session.agent})
    messages = Message.objects.filter(tenant=tenant, session=session)
    for message_id, tenant_id, role, data, seq in messages.values_list(
        "id", "tenant_id", "role", "data", "seq"
    ):
        state.messages[message_id] = {
            "tenant_id": tenant_id,
            "session_id": session.pk,
            "role": role,
            "data": data,
            "seq": seq,
        }
    parts = Part.objects.filter(tenant=tenant, session=session)
    for part_id, tenant_id, message_id, part_type, data, seq in parts.values_list(
        "id", "tenant_id", "message_id", "type", "data", "seq"
    ):
        state.parts[part_id] = {
            "tenant_id": tenant_id,
            "session_id": session.pk,
            "message_id": message_id,
            "type": part_type,
            "data": data,
            "seq": seq,
        }
    return state


def projection_from_log(*, tenant: Tenant, session: Session) -> Projection:
    """What the session's log projects to (computed in memory, the database untouched)."""
    events = SessionEvent.objects.filter(tenant=tenant, session=session).order_by("seq")
    return fold(events.iterator(chunk_size=2000))


def verify_log(*, tenant: Tenant, session: Session) -> list[ChainProblem]:
    """Sequence and hash-chain problems of the session's log (empty when it verifies)."""
    return verify_chain(iter_log(session=session), session_id=session.pk)


def open_assistant_messages(*, tenant: Tenant, session: Session) -> list[dict[str, Any]]:
    """Assistant messages not finished yet (``completed_at`` null), each ``{info, parts}``."""
    rows = list(
        Message.objects.filter(
            tenant=tenant, session=session, role="assistant", data__completed_at=None
        )
        .order_by("id")
        .values_list("id", "data")
    )
    return with_parts(tenant, session, rows)


def count_assistant_messages(*, tenant: Tenant, session: Session) -> int:
    return Message.objects.filter(tenant=tenant, session=session, role="assistant").count()


def get_message(*, tenant: Tenant, session_id: str, message_id: str) -> dict[str, Any]:
    """One message with its parts, ``{info, parts}``."""
    session = get_session(tenant=tenant, session_id=session_id)
    row = (
        Message.objects.filter(tenant=tenant, session=session, pk=message_id)
        .values_list("id", "data")
        .first()
    )
    if row is None:
        raise NotFound(f"no message {message_id!r} in this session")
    return with_parts(tenant, session, [row])[0]


def message_info(*, tenant: Tenant, session: Session, message_id: str) -> dict[str, Any] | None:
    """One message's ``info`` (no parts), or None when the session has no such message."""
    if not is_valid_id(message_id):
        return None
    data: dict[str, Any] | None = (
        Message.objects.filter(tenant=tenant, session=session, pk=message_id)
        .values_list("data", flat=True)
        .first()
    )
    return data


def part_data(*, tenant: Tenant, session: Session, part_id: str) -> dict[str, Any] | None:
    """One part's wire data, or None when the session has no such part."""
    if not is_valid_id(part_id):
        return None
    data: dict[str, Any] | None = (
        Part.objects.filter(tenant=tenant, session=session, pk=part_id)
        .values_list("data", flat=True)
        .first()
    )
    return data


def speaker(*, tenant: Tenant, session: Session, message_id: str) -> AbstractBaseUser | None:
    """Who spoke the turn of message ``message_id``: the user its info's ``user_id``
    names (on a reply, whose prompt or regeneration it answers), when still a member
    of the tenant. None for a message logged without one (before speakers were
    recorded) and for a user since deleted or gone from the tenant: their turn has no
    memory. Read from the store, so any process finishing a turn knows its speaker."""
    info = message_info(tenant=tenant, session=session, message_id=message_id)
    return None if info is None else member(tenant=tenant, user_id=info.get("user_id"))


def messages_by_id(
    *, tenant: Tenant, session: Session, message_ids: list[str]
) -> dict[str, dict[str, Any]]:
    """Messages of ``session`` with their parts, ``{id: {info, parts}}``, in two queries
    whatever their number (missing ids are left out): for a caller that holds the
    session already, e.g. the runtime recording a finished exchange."""
    rows = list(
        Message.objects.filter(tenant=tenant, session=session, pk__in=message_ids)
        .order_by("id")
        .values_list("id", "data")
    )
    return {item["info"]["id"]: item for item in with_parts(tenant, session, rows)}


def history_at(*, tenant: Tenant, session: Session, seq: int) -> list[dict[str, Any]]:
    """The history as it was right after event ``seq``, folded from the log."""
    events = SessionEvent.objects.filter(tenant=tenant, session=session, seq__lte=seq)
    state = fold(events.order_by("seq").iterator(chunk_size=2000))
    parts: dict[str, list[dict[str, Any]]] = {}
    for part_id in sorted(state.parts):
        row = state.parts[part_id]
        parts.setdefault(row["message_id"], []).append(row["data"])
    return [
        {"info": state.messages[message_id]["data"], "parts": parts.get(message_id, [])}
        for message_id in sorted(state.messages)
    ]


def head_seq(*, tenant: Tenant, session_id: str) -> int:
    """The seq of the session's newest event (0 for an empty log)."""
    session = get_session(tenant=tenant, session_id=session_id)
    newest = (
        SessionEvent.objects.filter(tenant=tenant, session=session)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return newest or 0


def log_head(*, tenant: Tenant, session: Session) -> tuple[int, str]:
    """``(seq, hash)`` of the session's newest event (``(0, "")`` for an empty log).

    The hash chain makes the pair name the whole log up to ``seq``: a log that
    was replaced (deleted and imported again, rolled back and rewritten) has
    another hash at that seq."""
    row = (
        SessionEvent.objects.filter(tenant=tenant, session=session)
        .order_by("-seq")
        .values_list("seq", "hash")
        .first()
    )
    return (row[0], row[1]) if row else (0, "")


def log_from(
    *, tenant: Tenant, session: Session, seq: int, limit: int | None = None
) -> list[tuple[int, str, str, Any]]:
    """``(seq, hash, type, data)`` of the session's events from ``seq`` on (inclusive),
    oldest first: one indexed range read, whose cost is the events read, not the log.

    Inclusive, so a reader that holds a state as of ``(seq, hash)`` also gets
    the event that proves its state is still a prefix of this log."""
    # Hand-written SQL, like the append path's (``sessions.sql``): this runs before every
    # model step, and the ORM's compile cost was most of it. The data column is decoded
    # by its own field, whatever the storage format.
    field = SessionEvent._meta.get_field("data")
    # The wire form, as the ORM reads it (models.wire_data_sql): the same keys in the same
    # order, so a state folded from these events is byte for byte one derived in full.
    data = wire_data_sql("", postgres=connection.vendor == "postgresql")
    query = (
        f"SELECT seq, hash, type, {data} FROM {sql.EVENT} "  # noqa: S608 (table names only)
        "WHERE session_id = %s AND tenant_id = %s AND seq >= %s ORDER BY seq"
    )
    params: list[Any] = [session.pk, tenant.pk, seq]
    if limit is not None:  # at most ``limit`` events
        query += " LIMIT %s"
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        rows = cursor.fetchall()
    decode = field.from_db_value  # no expression: the column read whole
    # The hash column holds raw bytes (migration 0008); callers compare hex, as log_head gives.
    return [
        (s, str(sql.digest_hex(h)), t, decode(d, None, connection))  # type: ignore[arg-type]
        for s, h, t, d in rows
    ]


def message_start_seq(*, tenant: Tenant, session: Session, message_id: str) -> int | None:
    """The seq of the event that created message ``message_id`` (None: no such message).

    A stream that replays one message whole starts right before it."""
    return (
        SessionEvent.objects.filter(
            tenant=tenant, session=session, type="message.updated", data__id=message_id
        )
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )


def last_message(*, tenant: Tenant, session: Session, role: str) -> dict[str, Any] | None:
    """The session's newest message of ``role``, ``{info, parts}`` (None: there is none)."""
    row = (
        Message.objects.filter(tenant=tenant, session=session, role=role)
        .order_by("-id")
        .values_list("id", "data")
        .first()
    )
    return with_parts(tenant, session, [row])[0] if row else None


def newest_messages(
    *, tenant: Tenant, session: Session, role: str, limit: int
) -> list[dict[str, Any]]:
    """The session's ``limit`` newest messages of ``role``, newest first, ``{info, parts}``."""
    rows = list(
        Message.objects.filter(tenant=tenant, session=session, role=role)
        .order_by("-id")
        .values_list("id", "data")[:limit]
    )
    return with_parts(tenant, session, rows)


def last_prompt_id(*, tenant: Tenant, session: Session) -> str | None:
    """The id of the session's newest user message (None: it has none)."""
    return (
        Message.objects.filter(tenant=tenant, session=session, role="user")
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )


def message_after(*, tenant: Tenant, session: Session, message_id: str) -> dict[str, Any] | None:
    """The info of the session's first message with an id above ``message_id`` (None:
    there is none). One read of the index ``message_session_id``."""
    row = (
        Message.objects.filter(tenant=tenant, session=session, id__gt=message_id)
        .order_by("id")
        .values_list("data", flat=True)
        .first()
    )
    return row


def message_infos_between(
    *, tenant: Tenant, session: Session, after: str | None, upto: str
) -> list[dict[str, Any]]:
    """The infos of the session's messages whose id is above ``after`` (None: from the
    first) and at most ``upto``, oldest first. One range read of the index
    ``message_session_id``."""
    rows = Message.objects.filter(tenant=tenant, session=session, id__lte=upto)
    if after is not None:
        rows = rows.filter(id__gt=after)
    return list(rows.order_by("id").values_list("data", flat=True))


def newest_replies(*, tenant: Tenant, session: Session, parent_ids: list[str]) -> dict[str, str]:
    """``{parent id: id of its newest assistant reply}`` for the given user messages
    (compaction summaries are not replies).

    A regenerated reply is a newer assistant message with the same parent; the
    older ones stay in the log, superseded (``forge.context.superseded``)."""
    newest: dict[str, str] = {}
    rows = (
        Message.objects.filter(
            tenant=tenant, session=session, role="assistant", data__parent_id__in=parent_ids
        )
        .exclude(data__summary=True)
        .order_by("id")
        # A key of a projection's data, in values_list: through the event (see
        # models.ProjectionManager; Django resolves no transform of an annotation here).
        .values_list("id", "event__data__parent_id")
    )
    for message_id, parent_id in rows:
        newest[str(parent_id)] = message_id
    return newest
