"""Reads of what a session's model sees: its context events (``context.updated``,
``session.compacted``) through their partial index, and the newest step's usage.

Each read touches a handful of rows whatever the log's length. The plain-SQL twins
that a turn runs instead (``sessions.turn_sql``) are pinned to these.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db.models import QuerySet

from accounts.models import Tenant

from ..models import Part, Session, SessionEvent

CONTEXT_TYPES = ("context.updated",)
# The condition of the partial index ``sessionevent_context``, as literal SQL: SQLite
# uses a partial index only when the query repeats its condition (a bound
# parameter does not prove it), so reads of those events say it this way.
_CONTEXT_INDEX_CONDITION = "\"type\" IN ('context.updated', 'session.compacted')"


def _indexed_context_events(*, tenant: Tenant, session: Session) -> QuerySet[SessionEvent]:
    """The session's ``context.updated`` and ``session.compacted`` events, read through
    their partial index (a handful of rows, whatever the log's length)."""
    return SessionEvent.objects.filter(tenant=tenant, session=session).extra(  # noqa: S610
        where=[_CONTEXT_INDEX_CONDITION]
    )


def context_updates(
    *, tenant: Tenant, session: Session, upto_seq: int | None = None
) -> list[dict[str, Any]]:
    """The data of the session's ``context.updated`` events, oldest first (up to a seq)."""
    events = _indexed_context_events(tenant=tenant, session=session).filter(type__in=CONTEXT_TYPES)
    if upto_seq is not None:
        events = events.filter(seq__lte=upto_seq)
    return list(events.order_by("seq").values_list("data", flat=True))


def placed_context_updates(
    *, tenant: Tenant, session: Session
) -> list[tuple[str | None, dict[str, Any]]]:
    """Each ``context.updated`` event's data, oldest first, with the id of the newest
    message created before it (None: none was), for a copy that writes them where they
    were among the messages it copies (``services.transfer``).

    Message ids sort by creation, so every message created before the event sorts at
    or before that id, and every later one after it. The messages' creations are read
    in one pass over their ``message.updated`` events up to the last update (three
    rows a turn, index only on PostgreSQL), and only when an update follows one."""
    updates = list(
        _indexed_context_events(tenant=tenant, session=session)
        .filter(type__in=CONTEXT_TYPES)
        .order_by("seq")
        .values_list("seq", "data")
    )
    if not updates:
        return []
    created = (
        SessionEvent.objects.filter(
            tenant=tenant, session=session, type="message.updated", seq__lt=updates[-1][0]
        )
        .order_by("seq")
        .values_list("seq", "data__id")
        .iterator(chunk_size=2000)
    )
    placed: list[tuple[str | None, dict[str, Any]]] = []
    newest: str | None = None
    pending = iter(updates)
    seq, data = next(pending)
    for message_seq, message_id in created:
        while message_seq > seq:
            placed.append((newest, data))
            seq, data = next(pending)
        if isinstance(message_id, str) and (newest is None or message_id > newest):
            newest = message_id
    placed.append((newest, data))
    placed.extend((newest, rest) for _, rest in pending)
    return placed


def _newest_compaction(
    *, tenant: Tenant, session: Session, upto_seq: int | None = None
) -> tuple[int, Any] | None:
    """``(seq, data)`` of the session's newest ``session.compacted`` event (up to a
    seq), through the partial index."""
    events = _indexed_context_events(tenant=tenant, session=session).filter(
        type="session.compacted"
    )
    if upto_seq is not None:
        events = events.filter(seq__lte=upto_seq)
    return events.order_by("-seq").values_list("seq", "data").first()


def last_compaction(
    *, tenant: Tenant, session: Session, upto_seq: int | None = None
) -> dict[str, Any] | None:
    """The data of the session's newest ``session.compacted`` event (up to a seq): the
    marker a finished compaction logs, ``{message_id, parent_id, tail_start_id, …}``.
    One indexed read (the ``sessionevent_context`` index), whatever the log's length."""
    marker = _newest_compaction(tenant=tenant, session=session, upto_seq=upto_seq)
    data = None if marker is None else marker[1]
    return data if isinstance(data, dict) else None


def last_step_tokens(
    *, tenant: Tenant, session: Session, stale_after_blocks: Collection[str] = ()
) -> dict[str, Any] | None:
    """The tokens the newest finished model step reported (its ``step-finish`` part),
    unless a compaction was logged after it (that usage no longer describes the
    context), or a ``context.updated`` holding a block of a kind in
    ``stale_after_blocks`` (a block that changes which history the model sees).
    Reads back from the newest part (index ``part_session_id``), then the context
    events after it (their partial index)."""
    row = (
        Part.objects.filter(tenant=tenant, session=session, type="step-finish")
        .order_by("-id")
        .values_list("seq", "data")
        .first()
    )
    if row is None:
        return None
    seq, data = row
    later = _indexed_context_events(tenant=tenant, session=session).filter(seq__gt=seq)
    stale = later.filter(type="session.compacted").exists()
    if not stale and stale_after_blocks:
        updates = later.filter(type__in=CONTEXT_TYPES).values_list("data", flat=True)
        stale = any(
            isinstance(block, dict) and block.get("kind") in stale_after_blocks
            for update in updates
            for block in (update.get("blocks") or [] if isinstance(update, dict) else [])
        )
    tokens = data.get("tokens") if isinstance(data, dict) else None
    return None if stale or not isinstance(tokens, dict) else tokens


def progress_since_compaction(*, tenant: Tenant, session: Session) -> bool:
    """Whether the conversation moved on since the newest ``session.compacted`` marker:
    a new prompt, or a model step that finished (outside the summary). True when
    the session was never compacted. Reads only the events after the marker."""
    marker = _newest_compaction(tenant=tenant, session=session)
    if marker is None:
        return True
    seq, data = marker
    summary_id = data.get("message_id") if isinstance(data, dict) else None
    after = SessionEvent.objects.filter(tenant=tenant, session=session, seq__gt=seq)
    steps = after.filter(type="part.updated", data__type="step-finish").exclude(
        data__message_id=summary_id
    )
    prompts = after.filter(type="message.updated", data__role="user")
    return steps.exists() or prompts.exists()
