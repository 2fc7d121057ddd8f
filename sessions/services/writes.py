"""One value per write a conversation takes: what the single entries and
``append_batch`` both append.

A write knows which stored rows its checks need (``table`` / ``obj_id`` /
``parent_message_id``: what the head read looks up) and how to turn itself,
given the head, into the one event it appends (:meth:`Write.build`), or to
refuse with the same ``ForgeError`` whichever entry carries it. Building does
no I/O and writes nothing: ``update_message`` & co. build against the head they
read, ``append_batch`` against a head it advances in memory through the batch,
so one rule is checked one way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import sql
from ..exceptions import InvalidEvent, InvalidMessage, InvalidPart, NotFound, SessionMismatch
from ..free_shapes import check_free_event
from ..ids import is_valid_id
from ..models import Session
from ..shapes import ShapeError, normalize_message, normalize_part

__all__ = [
    "FREE_EVENT_TYPES",
    "AppendEvent",
    "RemoveMessage",
    "RemovePart",
    "UpdateMessage",
    "UpdatePart",
    "Write",
    "existing",
]

# Event types a caller may append directly; the others have their own service.
FREE_EVENT_TYPES = frozenset({"session.compacted", "context.updated"})

Built = tuple[str, dict[str, Any]]


def existing(head: sql.Head, session: Session, kind: str, obj_id: Any) -> dict[str, Any] | None:
    """The stored message or part being updated; refuses another session's."""
    if head.owner is None:
        return None
    if head.owner != session.pk:
        raise SessionMismatch(f"{kind} {obj_id!r} belongs to another session")
    return head.data


def _id_of(obj: Any) -> Any:
    return obj.get("id") if isinstance(obj, Mapping) else None


def _valid(value: Any) -> str | None:
    """An id the head read may look up; anything else looks up nothing (and is refused
    by the shape's own check)."""
    return value if is_valid_id(value) else None


class Write:
    """A write of one event; subclasses say what it looks up and how it builds."""

    table: ClassVar[str | None] = None  # the table holding the row being updated, if any

    @property
    def obj_id(self) -> str | None:
        """The id of the row of ``table`` this write updates or removes."""
        return None

    @property
    def parent_message_id(self) -> str | None:
        """The message whose owner the head must carry (a new part's, a parent)."""
        return None

    def check(self) -> None:
        """The checks that need no stored row; raise to refuse (before any I/O)."""

    def build(self, session: Session, head: sql.Head) -> Built:
        """``(event_type, data)`` to append after ``head``, or raise: nothing is written.
        Runs :meth:`check` too, so building alone is the whole validation."""
        raise NotImplementedError


@dataclass(frozen=True)
class AppendEvent(Write):
    """An event that projects to no rows (``session.compacted``, ``context.updated``)."""

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        if self.type not in FREE_EVENT_TYPES:
            raise InvalidEvent(
                f"event type {self.type!r} cannot be appended directly; "
                f"allowed: {sorted(FREE_EVENT_TYPES)}"
            )
        if not isinstance(self.data, Mapping):
            raise InvalidEvent("event data must be an object")
        try:
            check_free_event(self.type, self.data)
        except ShapeError as exc:
            raise InvalidEvent(f"{self.type}: {exc}") from None

    def build(self, session: Session, head: sql.Head) -> Built:
        self.check()
        return self.type, dict(self.data)


@dataclass(frozen=True)
class UpdateMessage(Write):
    """Create or replace a message (``message.updated``). Omitted fields keep their value."""

    info: Mapping[str, Any]
    table: ClassVar[str | None] = sql.MESSAGE

    @property
    def obj_id(self) -> str | None:
        return _valid(_id_of(self.info))

    @property
    def parent_message_id(self) -> str | None:
        return _valid(self.info.get("parent_id")) if isinstance(self.info, Mapping) else None

    def build(self, session: Session, head: sql.Head) -> Built:
        stored = existing(head, session, "message", _id_of(self.info))
        try:
            message = normalize_message(self.info, session_id=session.pk, existing=stored)
        except ShapeError as exc:
            raise InvalidMessage(str(exc)) from None
        new_parent = message.get("parent_id")
        # A parent that changed is the one ``info`` named, which the head looked up.
        changed = new_parent and new_parent != (stored or {}).get("parent_id")
        if changed and head.parent_owner != session.pk:
            raise InvalidMessage(f"info.parent_id: no message {new_parent!r} in this session")
        return "message.updated", message


@dataclass(frozen=True)
class UpdatePart(Write):
    """Create or replace a part (``part.updated``). Omitted fields keep their value.

    Refuses: a message of another session, an unknown type, a shape that does
    not match the type, a type or message change, a tool state going backwards.
    """

    part: Mapping[str, Any]
    table: ClassVar[str | None] = sql.PART

    @property
    def obj_id(self) -> str | None:
        return _valid(_id_of(self.part))

    @property
    def parent_message_id(self) -> str | None:
        return _valid(self.part.get("message_id")) if isinstance(self.part, Mapping) else None

    def build(self, session: Session, head: sql.Head) -> Built:
        stored = existing(head, session, "part", _id_of(self.part))
        try:
            normalized = normalize_part(self.part, session_id=session.pk, existing=stored)
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


@dataclass(frozen=True)
class RemovePart(Write):
    """Remove a part from its message (``part.removed``)."""

    part_id: str
    table: ClassVar[str | None] = sql.PART

    @property
    def obj_id(self) -> str | None:
        return _valid(self.part_id)

    def build(self, session: Session, head: sql.Head) -> Built:
        if head.owner != session.pk or head.data is None:
            raise NotFound(f"no part {self.part_id!r} in this session")
        return "part.removed", {
            "session_id": session.pk,
            "message_id": head.data["message_id"],
            "part_id": self.part_id,
        }


@dataclass(frozen=True)
class RemoveMessage(Write):
    """Remove a message and its parts (``message.removed``)."""

    message_id: str
    table: ClassVar[str | None] = sql.MESSAGE

    @property
    def obj_id(self) -> str | None:
        return _valid(self.message_id)

    def build(self, session: Session, head: sql.Head) -> Built:
        if head.owner != session.pk:
            raise NotFound(f"no message {self.message_id!r} in this session")
        return "message.removed", {"session_id": session.pk, "message_id": self.message_id}
