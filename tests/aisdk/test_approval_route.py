"""Tool approvals through ``POST /api/chat`` under a real daphne: a rule asks before
``list_files`` runs; the reply's stream shows the request and ends with
``finish{tool-calls}`` (the message stays open); the client's next request, its tool
part ``approval-responded``, answers the call and streams the rest of the same
message. Bad answers are a JSON 4xx and log nothing; a client that did not declare
approvals (ai 5) sees a waiting tool."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sessions.models import SessionEvent
from tests.live import LiveServer

from .test_chat_routes import Chunks, chat_body, chat_session, headers, stored

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
PROMPT = "/tool list_files {}"


def approving(token: str) -> dict[str, str]:
    return {**headers(token), "X-Forge-Approvals": "1"}


def ask(live: LiveServer, token: str, chat_id: str) -> Chunks:
    """Prompt until the call waits: the stream, read to its end."""
    with httpx.stream(
        "POST",
        f"{live.url}/api/chat",
        json=chat_body(chat_id, PROMPT),
        headers=approving(token),
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        reader = Chunks(response)
        reader.ui.approvals = True
        reader.rest()
    return reader


def answer_body(chat_id: str, message_id: str, approval: Any, call_id: str) -> dict[str, Any]:
    """What ``addToolApprovalResponse`` + ``sendAutomaticallyWhen`` post."""
    tool = {
        "type": "tool-list_files",
        "toolCallId": call_id,
        "state": "approval-responded",
        "input": {},
        "approval": approval,
    }
    messages = chat_body(chat_id, PROMPT)["messages"][-1:]
    messages.append({"id": message_id, "role": "assistant", "parts": [tool]})
    body = {"id": chat_id, "trigger": "submit-message", "messageId": message_id}
    return {**body, "messages": messages}


def tool_part(chat_id: str) -> dict[str, Any]:
    return next(p for p in stored(chat_id)["parts"] if p["type"] == "tool")


def test_the_request_then_the_answer_streams_the_rest_of_the_same_reply(
    asking: LiveServer, user, token
):
    asked = ask(asking, token, "appr1")
    assert asked.ui.finish_reason == "tool-calls"
    assert asked.finished
    tool = asked.ui.parts[[p["type"] for p in asked.ui.parts].index("tool-list_files")]
    call_id = tool["toolCallId"]
    assert tool["state"] == "approval-requested"
    assert tool["approval"] == {"id": call_id}
    assert "message-metadata" not in asked.ui.types  # the message is not complete
    assert stored("appr1")["info"]["completed_at"] is None
    assert tool_part("appr1")["state"]["status"] == "awaiting-approval"

    asked.ui.respond(call_id, True)
    body = answer_body("appr1", str(asked.ui.id), {"id": call_id, "approved": True}, call_id)
    with httpx.stream(
        "POST", f"{asking.url}/api/chat", json=body, headers=headers(token), timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        reader = Chunks(response)
        reader.ui = asked.ui  # the client goes on with the message it has
        reader.rest()
    types = reader.ui.types[len(asked.chunks) :]
    assert types[:2] == ["start", "tool-output-available"], types
    assert "tool-input-start" not in types  # nothing the client has is sent again
    assert types[-1] == "finish"
    assert reader.ui.finish_reason == "stop"
    assert tool["state"] == "output-available"
    text = "".join(p["text"] for p in reader.ui.parts if p["type"] == "text")
    assert text.startswith("The tool returned")
    reply = stored("appr1")
    assert reply["info"]["id"] == asked.ui.id
    assert reply["info"]["completed_at"] is not None
    assert tool_part("appr1")["state"]["metadata"]["approval"]["approved"] is True

    # The same answer again: the call no longer waits; exactly one answer is logged.
    again = httpx.post(f"{asking.url}/api/chat", json=body, headers=headers(token), timeout=30)
    assert again.status_code in (404, 409), again.text
    assert again.headers["content-type"] == "application/json"


def test_a_denial_streams_the_denied_output_and_the_model_gets_the_reason(
    asking: LiveServer, user, token
):
    asked = ask(asking, token, "deny1")
    call_id = next(p for p in asked.ui.parts if p["type"] == "tool-list_files")["toolCallId"]
    asked.ui.respond(call_id, False)
    approval = {"id": call_id, "approved": False, "reason": "not this folder"}
    body = answer_body("deny1", str(asked.ui.id), approval, call_id)
    with httpx.stream(
        "POST", f"{asking.url}/api/chat", json=body, headers=headers(token), timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        reader = Chunks(response)
        reader.ui = asked.ui
        reader.rest()
    assert "tool-output-denied" in reader.ui.types
    text = "".join(p["text"] for p in reader.ui.parts if p["type"] == "text")
    assert "not this folder" in text
    state = tool_part("deny1")["state"]
    assert state["status"] == "error"
    assert state["metadata"]["denied"] is True


def test_bad_answers_are_json_4xx_and_log_nothing(asking: LiveServer, user, token, stranger_token):
    asked = ask(asking, token, "bad1")
    call_id = next(p for p in asked.ui.parts if p["type"] == "tool-list_files")["toolCallId"]
    message_id = str(asked.ui.id)
    session = chat_session("bad1")
    # (The session's title may be written meanwhile: its session.updated is not counted.)
    logged = SessionEvent.objects.filter(session=session).exclude(type="session.updated")
    before = logged.count()
    ok = {"id": call_id, "approved": True}
    cases = [
        (answer_body("bad1", message_id, {"id": call_id, "approved": "yes"}, call_id), 400),
        (answer_body("bad1", message_id, None, call_id), 400),
        (answer_body("bad1", message_id, {**ok, "reason": 5}, call_id), 400),
        (answer_body("bad1", message_id, {**ok, "id": "other"}, call_id), 400),
        (answer_body("bad1", "msg_unknown", ok, call_id), 404),
        (answer_body("bad1", message_id, {**ok, "id": "nosuchcall"}, "nosuchcall"), 404),
    ]
    for body, status in cases:
        response = httpx.post(f"{asking.url}/api/chat", json=body, headers=headers(token))
        assert response.status_code == status, (body, response.text)
        assert response.json()["error"]["code"]
    stranger = httpx.post(
        f"{asking.url}/api/chat",
        json=answer_body(session.pk, message_id, ok, call_id),
        headers=headers(stranger_token),
    )
    assert stranger.status_code == 404, stranger.text
    assert logged.count() == before
    assert tool_part("bad1")["state"]["status"] == "awaiting-approval"


def test_a_client_without_approvals_sees_a_waiting_tool(asking: LiveServer, user, token):
    with httpx.stream(
        "POST",
        f"{asking.url}/api/chat",
        json=chat_body("old1", PROMPT),
        headers=headers(token),
        timeout=60,
    ) as response:
        reader = Chunks(response)  # checks every chunk against ai 5's shapes too
        reader.rest()
    assert "tool-approval-request" not in reader.ui.types
    assert reader.ui.finish_reason == "tool-calls"
    tool = next(p for p in reader.ui.parts if p["type"] == "tool-list_files")
    assert (tool["state"], tool["input"]) == ("input-available", {})
    base = f"{asking.url}/api/chat/old1/messages"
    plain = httpx.get(base, headers=headers(token)).json()["results"][-1]["parts"]
    assert [p.get("state") for p in plain if "toolCallId" in p] == ["input-available"]
    declared = httpx.get(f"{base}?approvals=1", headers=headers(token)).json()["results"]
    assert [p.get("state") for p in declared[-1]["parts"] if "toolCallId" in p] == [
        "approval-requested"
    ]
