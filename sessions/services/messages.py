"""Messages and parts: the one write entry for what a conversation holds (CONTRACT §6),
and the bus-only frames that stream between their writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from .. import bus, sql
from ..exceptions import InvalidEvent, InvalidMessage, InvalidPart, NotFound, SessionMismatch
from ..frames import delta_frame, status_frame
from ..models import Session, SessionEvent
from ..shapes import ShapeError, normalize_message, normalize_part
from .append import commit, existing

# Event types a caller may append directly; the others have their own service.
FREE_EVENT_TYPES = frozenset({"session.compacted", "context.updated"})


def append_event(*, session: Session, type: str, data: Mapping[str, Any]) -> SessionEvent:
    """Append an event that projects to no rows (``session.compacted``, ``context.updated``)."""
    if type not in FREE_EVENT_TYPES:
        raise InvalidEvent(
            f"event type {type!r} cannot be appended directly; allowed: {sorted(FREE_EVENT_TYPES)}"
        )
    if not isinstance(data, Mapping):
        raise InvalidEvent("event data must be an object")
    return commit(session, lambda head: (type, dict(data)))


def _id_of(obj: Any) -> Any:
    return obj.get("id") if isinstance(obj, Mapping) else None


def update_message(*, session: Session, info: Mapping[str, Any]) -> SessionEvent:
    """Create or replace a message (``message.updated``). Omitted fields keep their value."""
    message_id = _id_of(info)
    parent_id = info.get("parent_id") if isinstance(info, Mapping) else None

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        stored = existing(head, session, "message", message_id)
        try:
            message = normalize_message(info, session_id=session.pk, existing=stored)
        except ShapeError as exc:
            raise InvalidMessage(str(exc)) from None
        new_parent = message.get("parent_id")
        # A parent that changed is the one ``info`` named, which the head looked up.
        changed = new_parent and new_parent != (stored or {}).get("parent_id")
        if changed and head.parent_owner != session.pk:
            raise InvalidMessage(f"info.parent_id: no message {new_parent!r} in this session")
        return "message.updated", message

    return commit(
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
        stored = existing(head, session, "part", part_id)
        try:
            normalized = normalize_part(part, session_id=session.pk, existing=stored)
        except ShapeError as exc:
            raise InvalidPart(str(exc)) from None
        if stored is None:
            if head.parent_owner is None:
                raise InvalidPart(f"part.message_id: no message {normalized['message_id']!r}")
            if head.parent_owner != session.pk:
                raise SessionMismatch(
                    f"part.message_id: message {normalized['message_id']!r} "
                    "belongs to another session"
                )
        return "part.updated", normalized

    return commit(session, build, table=sql.PART, obj_id=part_id, parent_message_id=message_id)


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

    return commit(session, build, table=sql.PART, obj_id=part_id)


def remove_message(*, session: Session, message_id: str) -> SessionEvent:
    """Remove a message and its parts (``message.removed``)."""

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        if head.owner != session.pk:
            raise NotFound(f"no message {message_id!r} in this session")
        return "message.removed", {"session_id": session.pk, "message_id": message_id}

    return commit(session, build, table=sql.MESSAGE, obj_id=message_id)


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
