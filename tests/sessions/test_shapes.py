"""The wire shapes of CONTRACT §2, without a database."""

import pytest

from sessions.shapes import ShapeError, normalize_message, normalize_part

S = "ses_1"
M = "msg_1"
T0 = "2026-11-30T01:00:00.000Z"
T1 = "2026-11-30T01:00:01.000Z"


def part(**fields):
    return normalize_part({"message_id": M, **fields}, session_id=S, existing=None)


VALID_PARTS: dict[str, dict[str, object]] = {
    "text": {"type": "text", "text": "hi"},
    "reasoning": {"type": "reasoning", "text": "hmm", "time": {"start": T0}},
    "tool": {"type": "tool", "call_id": "c1", "tool": "read_file", "state": {"status": "pending"}},
    "file": {"type": "file", "mime": "text/plain", "filename": "a.txt", "url": "/media/a.txt"},
    "agent": {"type": "agent", "name": "build"},
    "compaction": {"type": "compaction", "auto": True},
    "subtask": {"type": "subtask", "prompt": "p", "agent": "explore"},
    "step-start": {"type": "step-start", "snapshot": "abc"},
    "step-finish": {"type": "step-finish", "reason": "stop", "tokens": {"input": 3}, "cost": 0.5},
    "patch": {"type": "patch", "hash": "h", "files": ["a.txt"]},
}


@pytest.mark.parametrize("kind", sorted(VALID_PARTS))
def test_every_part_type_normalizes_with_common_fields(kind):
    result = normalize_part({"message_id": M, **VALID_PARTS[kind]}, session_id=S, existing=None)
    assert result["type"] == kind
    assert result["session_id"] == S
    assert result["message_id"] == M
    assert result["id"].startswith("prt_")


def test_defaults_are_filled_in():
    assert part(type="text", text="x")["synthetic"] is False
    finish = part(type="step-finish", reason="stop")
    assert finish["tokens"] == {
        "input": 0,
        "output": 0,
        "reasoning": 0,
        "cache_read": 0,
        "cache_write": 0,
    }
    assert finish["cost"] == 0
    assert part(type="compaction", auto=False)["overflow"] is False


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"type": "poem", "text": "x"}, "part.type"),
        ({"type": "text"}, "part.text: required"),
        ({"type": "text", "text": 3}, "part.text: expected a string"),
        ({"type": "text", "text": "x", "colour": "red"}, "unknown field"),
        ({"type": "text", "text": "x", "time": {"start": "yesterday"}}, "not an ISO-8601 time"),
        ({"type": "text", "text": "x", "synthetic": "no"}, "true or false"),
        ({"type": "step-finish", "reason": "stop", "tokens": {"input": -1}}, "non-negative"),
        ({"type": "step-finish", "reason": "stop", "tokens": {"wat": 1}}, "unknown keys"),
        ({"type": "step-finish", "reason": "stop", "cost": float("nan")}, "finite number"),
        ({"type": "patch", "hash": "h", "files": "a.txt"}, "list of strings"),
        ({"type": "tool", "call_id": "c", "tool": "t", "state": {"status": "done"}}, "status"),
        (
            {"type": "tool", "call_id": "c", "tool": "t", "state": {"status": "running"}},
            "input: required",
        ),
        (
            {
                "type": "tool",
                "call_id": "c",
                "tool": "t",
                "state": {"status": "completed", "input": {}, "time": {"start": T0, "end": T1}},
            },
            "output: required",
        ),
        (
            {
                "type": "tool",
                "call_id": "c",
                "tool": "t",
                "state": {"status": "running", "input": {"x": object()}, "time": {"start": T0}},
            },
            "not representable as JSON",
        ),
        ({"type": "text", "text": "x", "session_id": "ses_other"}, "not this session"),
        ({"type": "text", "text": "x", "id": "bad id"}, "part.id"),
    ],
)
def test_shape_errors_name_the_field(fields, message):
    with pytest.raises(ShapeError, match=message):
        part(**fields)


def test_a_part_needs_a_message():
    with pytest.raises(ShapeError, match="message_id: required"):
        normalize_part({"type": "text", "text": "x"}, session_id=S, existing=None)


def _tool(status):
    states = {
        "pending": {"status": "pending"},
        "running": {"status": "running", "input": {}, "time": {"start": T0}},
        "completed": {
            "status": "completed",
            "input": {},
            "output": "o",
            "time": {"start": T0, "end": T1},
        },
        "error": {"status": "error", "input": {}, "error": "e", "time": {"start": T0, "end": T1}},
    }
    return {"type": "tool", "call_id": "c", "tool": "t", "state": states[status]}


ALLOWED = {
    ("pending", "pending"),
    ("pending", "running"),
    ("pending", "completed"),
    ("pending", "error"),
    ("running", "running"),
    ("running", "completed"),
    ("running", "error"),
    ("completed", "completed"),
    ("error", "error"),
}


@pytest.mark.parametrize("old", ["pending", "running", "completed", "error"])
@pytest.mark.parametrize("new", ["pending", "running", "completed", "error"])
def test_tool_states_only_move_forward(old, new):
    existing = part(id="prt_1", **_tool(old))
    update = {"id": "prt_1", **_tool(new)}
    if (old, new) in ALLOWED:
        assert normalize_part(update, session_id=S, existing=existing)["state"]["status"] == new
    else:
        with pytest.raises(ShapeError, match=f"cannot go from {old} to {new}"):
            normalize_part(update, session_id=S, existing=existing)


def test_an_update_keeps_omitted_fields_and_cannot_change_type_or_message():
    existing = part(id="prt_1", type="text", text="a", synthetic=True)
    merged = normalize_part({"id": "prt_1", "text": "ab"}, session_id=S, existing=existing)
    assert merged["text"] == "ab"
    assert merged["synthetic"] is True
    with pytest.raises(ShapeError, match="cannot become"):
        normalize_part({"id": "prt_1", "type": "reasoning"}, session_id=S, existing=existing)
    with pytest.raises(ShapeError, match="another message"):
        normalize_part({"id": "prt_1", "message_id": "msg_2"}, session_id=S, existing=existing)


def test_messages_by_role():
    user = normalize_message({"role": "user"}, session_id=S, existing=None)
    assert set(user) == {"id", "session_id", "role", "created_at", "agent", "model"}
    assistant = normalize_message(
        {"role": "assistant", "parent_id": user["id"], "model": {"provider": "p", "model": "m"}},
        session_id=S,
        existing=None,
    )
    assert assistant["tokens"]["output"] == 0
    assert assistant["error"] is None
    assert assistant["summary"] is False
    assert assistant["id"] > user["id"]


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({"role": "system"}, "info.role"),
        ({"role": "user", "tokens": {}}, "unknown field"),
        ({"role": "assistant", "error": {"name": "X"}}, "message: required"),
        ({"role": "assistant", "model": {"provider": "p"}}, "model.model: required"),
        ({"role": "assistant", "cost": -1}, "must not be negative"),
        ({"role": "user", "created_at": "soon"}, "created_at"),
        ({"role": "user", "user_id": "7"}, "info.user_id: expected a user id"),
        ({"role": "assistant", "user_id": 0}, "info.user_id: expected a user id"),
        ({"role": "assistant", "user_id": True}, "info.user_id: expected a user id"),
        ({"role": "user", "user_id": None}, "info.user_id: expected a user id"),
    ],
)
def test_message_shape_errors(info, message):
    with pytest.raises(ShapeError, match=message):
        normalize_message(info, session_id=S, existing=None)


def test_a_message_keeps_its_role():
    existing = normalize_message({"role": "user", "id": "msg_1"}, session_id=S, existing=None)
    with pytest.raises(ShapeError, match="cannot become"):
        normalize_message({"id": "msg_1", "role": "assistant"}, session_id=S, existing=existing)


def test_the_speaker_is_optional_kept_by_updates_and_never_defaulted():
    """``user_id`` (who spoke) is logged when given and kept by later updates; a message
    without one stays without one, so logs written before it existed stay canonical."""
    spoken = normalize_message({"role": "assistant", "user_id": 7}, session_id=S, existing=None)
    assert spoken["user_id"] == 7
    later = normalize_message({"finish": "stop"}, session_id=S, existing=spoken)
    assert later["user_id"] == 7
    unspoken = normalize_message({"role": "user"}, session_id=S, existing=None)
    assert "user_id" not in unspoken
