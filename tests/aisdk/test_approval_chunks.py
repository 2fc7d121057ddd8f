"""Tool approvals in the UI message stream and the chat's history, on hand-made parts:
what ai 6+ clients are sent (the request, the denial), what ai 5 clients are sent
(a tool with its input, a tool error), a suspended turn's end, a continuation that
sends only what follows, and the approval bodies the chat route reads."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from forge.aisdk import approvals, chunks, history
from forge.aisdk.chunks import ReplyChunks
from forge.errors import ApprovalNotFound

MID = "msg_1"
CALL = "call_1"


def tool(status: str, **state: Any) -> dict[str, Any]:
    return {
        "id": "prt_tool",
        "message_id": MID,
        "session_id": "ses_1",
        "type": "tool",
        "call_id": CALL,
        "tool": "write_file",
        "state": {"status": status, **state},
    }


def event(part: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "event", "type": "part.updated", "data": part}


AWAITING = tool(
    "awaiting-approval",
    input={"path": "a.txt"},
    time={"start": "t"},
    metadata={"approval": {"expires_at": "later"}},
)
APPROVAL = {"approved": True, "reason": "", "at": "t", "by": 1}
RUNNING = tool("running", input={"path": "a.txt"}, metadata={"approval": APPROVAL})
DONE = tool("completed", input={"path": "a.txt"}, output="ok", metadata={"approval": APPROVAL})
DENIED = tool("error", input={"path": "a.txt"}, error="not that file", metadata={"denied": True})


def types(out: list[dict[str, Any]]) -> list[str]:
    return [chunk["type"] for chunk in out]


def test_an_awaiting_call_is_an_approval_request_for_ai6_and_a_waiting_tool_for_ai5():
    new = ReplyChunks(MID, approvals=True)
    out = new.accept(event(tool("pending"))) + new.accept(event(AWAITING))
    assert types(out) == [
        "start",
        "tool-input-start",
        "tool-input-available",
        "tool-approval-request",
    ]
    assert out[-1] == {"type": "tool-approval-request", "approvalId": CALL, "toolCallId": CALL}
    assert new.accept(event(AWAITING)) == []  # asked once
    assert new.awaiting == {CALL}
    assert new.suspend() == [{"type": "finish", "finishReason": "tool-calls"}]
    assert new.done
    assert new.accept(event(DONE)) == []

    old = ReplyChunks(MID)
    out = old.accept(event(AWAITING))
    assert types(out) == ["start", "tool-input-start", "tool-input-available"]
    assert out[-1]["input"] == {"path": "a.txt"}
    assert types(old.suspend()) == ["finish"]


def test_a_continuation_sends_only_what_follows_the_stored_message():
    reply = ReplyChunks(MID, approvals=True)
    step = {"id": "prt_step", "message_id": MID, "type": "step-start"}
    text: dict[str, Any] = {"id": "prt_t", "message_id": MID, "type": "text", "text": "Hi."}
    text["time"] = {"start": "t", "end": "t"}
    reply.seen([step, text, AWAITING])
    assert reply.awaiting == {CALL}
    out = reply.accept(event(RUNNING)) + reply.accept(event(DONE))
    assert out == [
        {"type": "start", "messageId": MID},
        {"type": "tool-output-available", "toolCallId": CALL, "output": "ok"},
    ]
    assert reply.awaiting == set()


def test_a_denial_is_a_denied_output_for_ai6_and_a_tool_error_for_ai5():
    new = ReplyChunks(MID, approvals=True)
    new.seen([AWAITING])
    assert new.accept(event(DENIED))[1:] == [{"type": "tool-output-denied", "toolCallId": CALL}]
    old = ReplyChunks(MID)
    out = old.accept(event(AWAITING)) + old.accept(event(DENIED))
    assert out[-1] == {
        "type": "tool-output-error",
        "toolCallId": CALL,
        "errorText": "not that file",
    }


def test_the_history_shows_approval_states_to_ai6_and_plain_states_to_ai5():
    assert history.ui_part(AWAITING, approvals=True) == [
        {
            "type": "tool-write_file",
            "toolCallId": CALL,
            "state": "approval-requested",
            "input": {"path": "a.txt"},
            "approval": {"id": CALL},
        }
    ]
    assert history.ui_part(AWAITING)[0]["state"] == "input-available"
    assert "approval" not in history.ui_part(AWAITING)[0]
    denied = history.ui_part(DENIED, approvals=True)[0]
    assert denied["state"] == "output-denied"
    assert denied["approval"] == {"id": CALL, "approved": False, "reason": "not that file"}
    assert history.ui_part(DENIED)[0]["state"] == "output-error"
    done = history.ui_part(DONE, approvals=True)[0]
    assert (done["state"], done["approval"]) == ("output-available", {"id": CALL, "approved": True})
    assert "approval" not in history.ui_part(DONE)[0]


BAD_INPUT = tool(
    "error",
    input={},
    error="the tool input is not valid JSON",
    metadata={"input": {}, "raw_input": '{"path": "a.txt"'},
)


def test_input_that_is_no_json_is_a_tool_input_error_for_ai6_with_the_raw_input():
    """An earlier round's finding: the model's unparseable input streamed as
    tool-input-available with {} (input it never sent). ai 6+ keeps the raw input; ai
    5.0.0's schema has no tool-input-error, so ai 5 clients get {} and the error, as
    before."""
    from tests.aisdk.ui import UIMessage

    new = ReplyChunks(MID, approvals=True)
    out = new.accept(event(tool("pending"))) + new.accept(event(BAD_INPUT))
    assert types(out) == ["start", "tool-input-start", "tool-input-error"]
    assert out[-1] == {
        "type": "tool-input-error",
        "toolCallId": CALL,
        "toolName": "write_file",
        "input": '{"path": "a.txt"',
        "errorText": "the tool input is not valid JSON",
    }
    client = UIMessage(approvals=True)
    for chunk in out:
        client.apply(chunk)
    assert client.parts == history.ui_part(BAD_INPUT, approvals=True)
    assert client.parts[0]["rawInput"] == '{"path": "a.txt"'
    assert "input" not in client.parts[0]

    old = ReplyChunks(MID)
    out = old.accept(event(BAD_INPUT))
    assert types(out)[-2:] == ["tool-input-available", "tool-output-error"]
    assert history.ui_part(BAD_INPUT)[0]["input"] == {}


def answer_body(*parts: dict[str, Any], message_id: Any = MID) -> dict[str, Any]:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    assistant = {"id": message_id, "role": "assistant", "parts": list(parts)}
    return {"id": "chat1", "trigger": "submit-message", "messages": [user, assistant]}


def responded(approval: Any, call_id: str = CALL) -> dict[str, Any]:
    return {
        "type": "tool-write_file",
        "toolCallId": call_id,
        "state": "approval-responded",
        "input": {"path": "a.txt"},
        "approval": approval,
    }


def test_an_approval_body_is_read_and_its_bad_shapes_refused():
    body = answer_body({"type": "step-start"}, responded({"id": CALL, "approved": False}))
    assert approvals.is_answer(body)
    assert approvals.answers_of(body) == (MID, [approvals.Answer(CALL, False, "")])
    reason = answer_body(responded({"id": CALL, "approved": True, "reason": "fine"}))
    assert approvals.answers_of(reason)[1] == [approvals.Answer(CALL, True, "fine")]
    prompt = answer_body()
    prompt["messages"].pop()
    assert not approvals.is_answer(prompt)
    for bad in (
        answer_body(),  # an assistant message with no response
        answer_body(responded({"id": CALL, "approved": True}), message_id=None),
        answer_body(responded(None)),
        answer_body(responded({"id": CALL, "approved": "yes"})),
        answer_body(responded({"id": "", "approved": True})),
        answer_body(responded({"id": CALL, "approved": True, "reason": 3})),
        answer_body(responded({"id": "other", "approved": True})),
    ):
        with pytest.raises(ValidationError):
            approvals.answers_of(bad)


def test_only_calls_still_waiting_are_answered_again():
    one, two = approvals.Answer(CALL, True, ""), approvals.Answer("call_2", False, "")
    answered = {**DONE, "id": "prt_2", "call_id": "call_2"}
    assert approvals.to_send([one, two], [AWAITING, answered]) == [one]
    assert approvals.to_send([two, one], [DONE, answered]) == [two]  # the service refuses it


def test_a_call_not_of_the_named_message_is_refused_before_anything_is_sent():
    one, other = approvals.Answer(CALL, True, ""), approvals.Answer("call_x", True, "")
    for answers, parts in (([one], []), ([one, other], [AWAITING])):
        with pytest.raises(ApprovalNotFound):
            approvals.to_send(answers, parts)


def test_chunk_shapes_are_the_ones_ai6_and_ai7_declare():
    assert chunks.tool_approval_request("c") == {
        "type": "tool-approval-request",
        "approvalId": "c",
        "toolCallId": "c",
    }
    assert chunks.tool_output_denied("c") == {"type": "tool-output-denied", "toolCallId": "c"}
