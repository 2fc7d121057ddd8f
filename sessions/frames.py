"""Every frame Forge puts on the wire, shaped in this one place (CONTRACT §2, §4).

A frame is a JSON object with a ``kind``:

* ``event``: one durable event of the log, ``{seq, id, session_id, type, at, data}``;
  the only kind with a ``seq``, and the only kind SSE gives an ``id:``;
* ``delta``: ``part.delta``, a piece of a streaming part's text at ``offset`` (the
  length of the text before it, in code points);
* ``snapshot``: ``part.snapshot``, the whole text so far of a part still streaming;
* ``status``: ``session.status``, ``idle`` / ``busy`` / ``retry``;
* ``error``, ``ack``, ``pong``: answers to a socket client's own frames.

Durable and ephemeral frames travel the same bus (``sessions.bus``); the faces
send them as they are. Nothing else builds a frame: a new kind starts here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TypedDict

from accounts.times import format_time

from .exceptions import InvalidPart

Frame = dict[str, Any]  # any frame, as sent


class EventFrame(TypedDict):
    kind: Literal["event"]
    seq: int
    id: str
    session_id: str
    type: str
    at: str
    data: dict[str, Any]


class DeltaFrame(TypedDict):
    kind: Literal["delta"]
    type: Literal["part.delta"]
    session_id: str
    message_id: str
    part_id: str
    field: str
    offset: int
    delta: str


class StatusFrame(TypedDict):
    kind: Literal["status"]
    type: Literal["session.status"]
    session_id: str
    status: Literal["idle", "busy", "retry"]
    attempt: int | None
    next_at: str | None  # ISO-8601 UTC, as every time on the wire


STATUSES = ("idle", "busy", "retry")


def event_frame(event: Mapping[str, Any]) -> Frame:
    """A durable event (its wire body, ``{seq, id, session_id, type, at, data}``) as a frame."""
    return {"kind": "event", **event}


def delta_frame(
    *, session_id: str, message_id: str, part_id: str, field: str, offset: int, delta: str
) -> Frame:
    """The ``part.delta`` frame; raises ``InvalidPart`` for a bad field, offset or delta."""
    if field != "text":
        raise InvalidPart(f"delta field must be 'text', got {field!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidPart(f"delta offset must be a non-negative integer, got {offset!r}")
    if not isinstance(delta, str):
        raise InvalidPart("delta must be a string")
    frame: DeltaFrame = {
        "kind": "delta",
        "type": "part.delta",
        "session_id": session_id,
        "message_id": message_id,
        "part_id": part_id,
        "field": field,
        "offset": offset,
        "delta": delta,
    }
    return dict(frame)


def snapshot_frame(snapshot: Mapping[str, Any]) -> Frame:
    """``part.snapshot`` from ``{session_id, message_id, part_id, field, text}``."""
    return {"kind": "snapshot", "type": "part.snapshot", **snapshot}


def status_frame(
    session_id: str,
    status: Literal["idle", "busy", "retry"],
    *,
    attempt: int | None = None,
    next_at: float | None = None,
) -> Frame:
    """``next_at`` (a retry's next attempt) is given as a UNIX time and sent as an
    ISO-8601 UTC string, as every time on the wire (contract §2): sent as the number,
    the chat page read it as milliseconds and said "retrying at Jan 21" (QA)."""
    if status not in STATUSES:
        raise ValueError(f"unknown session status {status!r}")
    frame: StatusFrame = {
        "kind": "status",
        "type": "session.status",
        "session_id": session_id,
        "status": status,
        "attempt": attempt,
        "next_at": None if next_at is None else format_time(datetime.fromtimestamp(next_at, UTC)),
    }
    return dict(frame)


def error_frame(code: str, message: str, **extra: Any) -> Frame:
    return {"kind": "error", "code": code, "message": message, **extra}


def deleted_frame(session_id: str) -> Frame:
    """What every subscriber of a session hears once the session is deleted (bus only):
    an error frame ``not_found``; sockets then close with 4404 and SSE streams end."""
    return error_frame("not_found", f"session {session_id!r} was deleted", session_id=session_id)


def is_deleted_frame(frame: Frame) -> bool:
    return frame.get("kind") == "error" and frame.get("code") == "not_found"


def ack_frame(*, client_id: Any, message_id: str, assistant_message_id: str) -> Frame:
    return {
        "kind": "ack",
        "client_id": client_id,
        "message_id": message_id,
        "assistant_message_id": assistant_message_id,
    }


def pong_frame() -> Frame:
    return {"kind": "pong"}


def is_delta(frame: Mapping[str, Any]) -> bool:
    return frame.get("kind") == "delta"


def merge_deltas(frames: Iterable[Frame]) -> list[Frame]:
    """Frames in order, with each run of contiguous deltas of one part joined into one.

    The one delta merge: the bus applies it to frames queued behind each other
    before they reach the channel layer, the hub to frames a slow client has not
    taken yet. Only deltas whose offsets meet are joined, so a client that
    checks offsets sees the same text either way.
    """
    merged: list[Frame] = []
    pieces: list[str] = []  # the text of the run ending merged[-1], joined once at its end

    def close_run() -> None:
        if len(pieces) > 1:
            merged[-1] = {**merged[-1], "delta": "".join(pieces)}
        pieces.clear()

    end = -1
    for frame in frames:
        last = merged[-1] if merged else None
        if (
            last is not None
            and pieces
            and is_delta(frame)
            and frame["part_id"] == last["part_id"]
            and frame["offset"] == end
        ):
            pieces.append(frame["delta"])
            end += len(frame["delta"])
            continue
        close_run()
        merged.append(frame)
        if is_delta(frame):
            pieces.append(frame["delta"])
            end = frame["offset"] + len(frame["delta"])
    close_run()
    return merged
