"""No string in the log holds a NUL character (U+0000): every write entry refuses it
with its own error, and nothing is written.

PostgreSQL cannot store U+0000 in ``jsonb`` (nor in ``text``): before this rule a
NUL anywhere in an event's data reached the database and came back as a
``DataError`` (a 500 on HTTP, a failed reply in a turn), while SQLite stored it,
so a log exported from one stack could not be imported on the other. Issue 17,
MEDIUM 5.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from accounts.exceptions import ForgeError
from sessions import services
from sessions.exceptions import InvalidEvent, InvalidMessage, InvalidPart
from sessions.ids import new_part_id
from sessions.models import Message, Part, SessionEvent
from sessions.services import AppendEvent, UpdateMessage, UpdatePart

pytestmark = pytest.mark.django_db

TIME = "2026-11-30T00:00:00.000Z"


def _text(session: Any, message_id: str) -> None:
    services.update_part(
        session=session, part={"message_id": message_id, "type": "text", "text": "a\x00b"}
    )


def _tool_input_value(session: Any, message_id: str) -> None:
    services.update_part(
        session=session,
        part={
            "message_id": message_id,
            "type": "tool",
            "call_id": "c1",
            "tool": "write_file",
            "state": {"status": "running", "input": {"content": "x\x00"}, "time": {"start": TIME}},
        },
    )


def _tool_input_key(session: Any, message_id: str) -> None:
    services.update_part(
        session=session,
        part={
            "message_id": message_id,
            "type": "tool",
            "call_id": "c1",
            "tool": "write_file",
            "state": {"status": "running", "input": {"a\x00": 1}, "time": {"start": TIME}},
        },
    )


def _tool_output_nested(session: Any, message_id: str) -> None:
    services.update_part(
        session=session,
        part={
            "message_id": message_id,
            "type": "tool",
            "call_id": "c1",
            "tool": "list_files",
            "state": {
                "status": "completed",
                "input": {},
                "output": "ok",
                "metadata": {"files": ["a", ["b\x00"]]},
                "time": {"start": TIME, "end": TIME},
            },
        },
    )


def _message_error(session: Any, message_id: str) -> None:
    services.update_message(
        session=session,
        info={
            "role": "assistant",
            "parent_id": message_id,
            "error": {"name": "APIError", "message": "bad \x00 byte"},
        },
    )


def _context_block(session: Any, message_id: str) -> None:
    services.append_event(
        session=session,
        type="context.updated",
        data={"blocks": [{"kind": "system", "key": "agent", "text": "be \x00 good"}]},
    )


def _batch(session: Any, message_id: str) -> None:
    services.append_batch(
        session=session,
        writes=[
            UpdatePart(part={"message_id": message_id, "type": "text", "text": "fine"}),
            AppendEvent(type="context.updated", data={"blocks": []}),
            UpdateMessage(info={"role": "user", "agent": "\x00"}),
        ],
    )


@pytest.mark.parametrize(
    ("write", "error", "where"),
    [
        (_text, InvalidPart, "part.text"),
        (_tool_input_value, InvalidPart, "part.state.input.content"),
        (_tool_input_key, InvalidPart, "part.state.input"),
        (_tool_output_nested, InvalidPart, "part.state.metadata.files[1][0]"),
        (_message_error, InvalidMessage, "info.error.message"),
        (_context_block, InvalidEvent, "data.blocks[0].text"),
        (_batch, InvalidMessage, "info.agent"),
    ],
    ids=["text", "tool-input", "tool-input-key", "nested-metadata", "error", "context", "batch"],
)
def test_a_nul_anywhere_in_a_write_is_refused_and_nothing_is_written(
    session: Any,
    user_message: dict[str, Any],
    write: Callable[[Any, str], None],
    error: type[ForgeError],
    where: str,
) -> None:
    counts = (SessionEvent.objects.count(), Message.objects.count(), Part.objects.count())
    with pytest.raises(error) as refused:
        write(session, user_message["id"])
    assert refused.value.status == 400
    assert "NUL" in str(refused.value)
    assert str(refused.value).startswith(where), str(refused.value)
    assert (SessionEvent.objects.count(), Message.objects.count(), Part.objects.count()) == counts


def test_a_backslash_u0000_that_is_text_is_no_nul(session: Any, user_message: dict[str, Any]):
    """The six characters ``\\u0000`` are text like any other (their JSON is ``\\\\u0000``)."""
    event = services.update_part(
        session=session,
        part={
            "id": new_part_id(),
            "message_id": user_message["id"],
            "type": "text",
            "text": "C's NUL is written \\u0000 or \\0",
        },
    )
    assert Part.objects.get(pk=event.data["id"]).data["text"] == "C's NUL is written \\u0000 or \\0"


@pytest.mark.parametrize(
    ("part", "where"),
    [
        ({"type": "text", "text": "smile \ud83d"}, "part.text"),
        (
            {
                "type": "tool",
                "call_id": "c1",
                "tool": "write_file",
                "state": {"status": "running", "input": {"a\udc00": 1}, "time": {"start": TIME}},
            },
            "part.state.input",
        ),
    ],
    ids=["text", "key"],
)
def test_a_lone_surrogate_in_a_write_is_refused_and_nothing_is_written(
    session: Any, user_message: dict[str, Any], part: dict[str, Any], where: str
) -> None:
    """Half a UTF-16 surrogate pair is no text: the event's hash raised
    ``UnicodeEncodeError``. Refused like NUL, with the write's own error (400)."""
    counts = (SessionEvent.objects.count(), Part.objects.count())
    with pytest.raises(InvalidPart) as refused:
        services.update_part(session=session, part={"message_id": user_message["id"], **part})
    assert refused.value.status == 400
    assert str(refused.value).startswith(where), str(refused.value)
    assert "lone surrogate" in str(refused.value)
    assert (SessionEvent.objects.count(), Part.objects.count()) == counts
