"""Messages and parts: the one write entry for what a conversation holds (CONTRACT §6),
and the bus-only frames that stream between their writes."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

from django.db import transaction

from .. import bus
from ..exceptions import ReplyOpen
from ..frames import delta_frame, status_frame
from ..models import Part, Session, SessionEvent
from ..selectors import open_assistant_messages
from .append import commit
from .writes import (
    FREE_EVENT_TYPES,
    AppendEvent,
    RemoveMessage,
    RemovePart,
    UpdateMessage,
    UpdatePart,
    Write,
)

__all__ = [
    "FREE_EVENT_TYPES",
    "append_event",
    "apublish_delta",
    "apublish_status",
    "publish_delta",
    "remove_message",
    "remove_part",
    "update_message",
    "update_part",
]


def _commit(session: Session, write: Write) -> SessionEvent:
    """Append ``write`` alone: the head it needs read (and locked), then built and written."""
    return commit(
        session,
        partial(write.build, session),
        table=write.table,
        obj_id=write.obj_id,
        parent_message_id=write.parent_message_id,
    )


def append_event(*, session: Session, type: str, data: Mapping[str, Any]) -> SessionEvent:
    """Append an event that projects to no rows (``session.compacted``, ``context.updated``)."""
    write = AppendEvent(type=type, data=data)
    write.check()  # refused before any I/O
    return _commit(session, write)


def update_message(*, session: Session, info: Mapping[str, Any]) -> SessionEvent:
    """Create or replace a message (``message.updated``). Omitted fields keep their value."""
    return _commit(session, UpdateMessage(info=info))


def update_part(*, session: Session, part: Mapping[str, Any]) -> SessionEvent:
    """Create or replace a part (``part.updated``); see :class:`~.writes.UpdatePart`."""
    return _commit(session, UpdatePart(part=part))


def remove_part(*, session: Session, part_id: str) -> SessionEvent:
    """Remove a part from its message (``part.removed``). ``ReplyOpen`` for a part of a
    reply still open (:func:`_refuse_open`)."""
    message_id = (
        Part.objects.filter(tenant_id=session.tenant_id, session=session, pk=part_id)
        .values_list("message_id", flat=True)
        .first()
    )
    if message_id is not None:
        _refuse_open(session, message_id)
    return _commit(session, RemovePart(part_id=part_id))


def remove_message(*, session: Session, message_id: str) -> SessionEvent:
    """Remove a message and its parts (``message.removed``). ``ReplyOpen`` for a reply
    still open, or its prompt (:func:`_refuse_open`)."""
    _refuse_open(session, message_id)
    return _commit(session, RemoveMessage(message_id=message_id))


def _refuse_open(session: Session, message_id: str) -> None:
    """``ReplyOpen`` when ``message_id`` is a reply still open (``completed_at`` null: its
    turn runs, or waits for an approval) or the prompt of one. The turn writes after it
    (its parts, its completion naming the prompt as parent): removing the prompt made a
    log that import refuses, and removing the reply failed the turn's next write (QA)."""
    for item in open_assistant_messages(tenant=session.tenant, session=session):
        info = item["info"]
        if message_id in (info.get("id"), info.get("parent_id")):
            raise ReplyOpen(
                f"message {message_id!r} belongs to reply {info.get('id')!r}, still open "
                "(running, or waiting for an approval): abort it first"
            )


# --- the bus only ---------------------------------------------------------------
# Every ephemeral frame reaches the bus through these, in order with the durable
# frames of the same loop (``bus``'s outbox).


def publish_delta(
    *, session: Session, message_id: str, part_id: str, field: str, offset: int, delta: str
) -> None:
    """Publish a ``part.delta`` frame: the bus only, never the log."""
    frame = delta_frame(
        session_id=session.pk,
        message_id=message_id,
        part_id=part_id,
        field=field,
        offset=offset,
        delta=delta,
    )
    bus.publish(session.pk, frame)


async def apublish_delta(*, session: Session, **delta: Any) -> None:
    """:func:`publish_delta` for async callers (the runtime's event loop); same arguments."""
    await bus.apublish(session.pk, delta_frame(session_id=session.pk, **delta))


async def apublish_status(
    *,
    session_id: str,
    status: Literal["idle", "busy", "retry"],
    attempt: int | None = None,
    next_at: float | None = None,
) -> None:
    """Publish a ``session.status`` frame (bus only): a turn started, retries, or ended."""
    await bus.apublish(
        session_id, status_frame(session_id, status, attempt=attempt, next_at=next_at)
    )


def publish_status_on_commit(*, session_id: str, status: Literal["idle", "busy", "retry"]) -> None:
    """Publish a ``session.status`` frame once the current transaction commits, after the
    frames of the events it wrote (``transaction.on_commit`` runs in order): a turn that
    ends in the transaction of its last write says so in order with that write."""
    transaction.on_commit(
        partial(bus.publish_after_commit, session_id, status_frame(session_id, status))
    )
