"""Messages and parts: the one write entry for what a conversation holds (CONTRACT §6),
and the bus-only frames that stream between their writes."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

from django.db import transaction

from .. import bus
from ..frames import delta_frame, status_frame
from ..models import Session, SessionEvent
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
    """Remove a part from its message (``part.removed``)."""
    return _commit(session, RemovePart(part_id=part_id))


def remove_message(*, session: Session, message_id: str) -> SessionEvent:
    """Remove a message and its parts (``message.removed``)."""
    return _commit(session, RemoveMessage(message_id=message_id))


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
