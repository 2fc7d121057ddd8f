"""Two calls of one step wait; the AI SDK client answers both in one request (its
``sendAutomaticallyWhen`` waits until every call of the message is responded). Both
answers are logged in one transaction and the turn goes on once, after the last: the
rest of the same reply streams back. An answer naming another message than the one
the call waits in is a JSON 404 and logs nothing (it ran the tool, then hung the
stream on a message that never finished)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from sessions.models import SessionEvent
from tests.live import LiveServer, daphne

from .test_approval_route import approving
from .test_chat_routes import Chunks, chat_body, chat_history, chat_session, headers, stored

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _call(call_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "tool-input-start", "call_id": call_id, "tool": "list_files"},
        {"type": "tool-input-delta", "call_id": call_id, "delta": "{}"},
        {"type": "tool-input-end", "call_id": call_id},
        {"type": "tool-call", "call_id": call_id, "tool": "list_files", "input": "{}"},
    ]


SCRIPT = [
    [
        *_call("call_a"),
        *_call("call_b"),
        {"type": "finish-step", "finish_reason": "tool-calls", "usage": {"input": 5, "output": 3}},
    ],
    [
        {"type": "text-delta", "id": "t", "delta": "done"},
        {"type": "finish-step", "finish_reason": "stop", "usage": {"input": 5, "output": 1}},
    ],
]


def two_asks_daphne(tmp_path: Path, name: str, **env: str) -> Any:
    """A daphne whose model makes one step with two ``list_files`` calls, both asked."""
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return daphne(
        tmp_path,
        name,
        FORGE_MODEL="offline/script",
        FORGE_SCRIPT=str(path),
        FORGE_TOOL_APPROVAL=json.dumps({"list_files": "ask"}),
        **env,
    )


@pytest.fixture
def two_asks(tmp_path: Path, agents: Any) -> Any:
    with two_asks_daphne(tmp_path, "two") as live:
        yield live


def ask(live: LiveServer, token: str, chat_id: str) -> Chunks:
    with httpx.stream(
        "POST",
        f"{live.url}/api/chat",
        json=chat_body(chat_id, "go"),
        headers=approving(token),
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        reader = Chunks(response)
        reader.ui.approvals = True
        reader.rest()
    assert reader.ui.finish_reason == "tool-calls"
    return reader


def responded(call_id: str, approved: bool) -> dict[str, Any]:
    return {
        "type": "tool-list_files",
        "toolCallId": call_id,
        "state": "approval-responded",
        "input": {},
        "approval": {"id": call_id, "approved": approved},
    }


def answers(chat_id: str, message_id: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    messages = chat_body(chat_id, "go")["messages"][-1:]
    messages.append({"id": message_id, "role": "assistant", "parts": parts})
    return {
        "id": chat_id,
        "trigger": "submit-message",
        "messageId": message_id,
        "messages": messages,
    }


def answered(
    live: LiveServer,
    token: str,
    chat_id: str,
    asked: Chunks,
    parts: list[dict[str, Any]],
    timeout: float = 60,
) -> Chunks:
    """Post the answer request of ``parts`` for the reply ``asked`` read, and read the
    rest of that reply (200) into the same UI message."""
    body = answers(chat_id, str(asked.ui.id), parts)
    with httpx.stream(
        "POST", f"{live.url}/api/chat", json=body, headers=headers(token), timeout=timeout
    ) as response:
        assert response.status_code == 200, response.read()
        reader = Chunks(response)
        reader.ui = asked.ui
        reader.rest()
    return reader


def tools(chat_id: str) -> dict[str, dict[str, Any]]:
    return {p["call_id"]: p["state"] for p in stored(chat_id)["parts"] if p["type"] == "tool"}


@pytest.mark.parametrize("deny_b", [False, True])
def test_both_answers_in_one_request_go_on_once(two_asks: LiveServer, user, token, deny_b):
    chat = f"two{int(deny_b)}"
    asked = ask(two_asks, token, chat)
    assert {s["status"] for s in tools(chat).values()} == {"awaiting-approval"}
    asked.ui.respond("call_a", True)
    asked.ui.respond("call_b", not deny_b)
    parts = [responded("call_a", True), responded("call_b", not deny_b)]
    reader = answered(two_asks, token, chat, asked, parts)
    assert reader.finished
    assert reader.ui.finish_reason == "stop"
    text = "".join(p["text"] for p in reader.ui.parts if p["type"] == "text")
    assert text == "done"
    states = tools(chat)
    assert states["call_a"]["status"] == "completed"
    assert states["call_a"]["metadata"]["approval"]["approved"] is True
    if deny_b:
        assert states["call_b"]["status"] == "error"
        assert states["call_b"]["metadata"]["denied"] is True
    else:
        assert states["call_b"]["status"] == "completed"
        assert states["call_b"]["metadata"]["approval"]["approved"] is True
    assert stored(chat)["info"]["completed_at"] is not None
    step_finishes = [p for p in stored(chat)["parts"] if p["type"] == "step-finish"]
    assert len(step_finishes) == 2  # one step asked, exactly one more went on


def test_an_answer_naming_another_message_is_404_and_logs_nothing(
    two_asks: LiveServer, user, token
):
    chat = "wrongmsg"
    ask(two_asks, token, chat)
    user_id = chat_history(chat)[-2]["info"]["id"]
    assert chat_history(chat)[-2]["info"]["role"] == "user"
    logged = SessionEvent.objects.filter(session=chat_session(chat)).exclude(type="session.updated")
    before = logged.count()
    body = answers(chat, user_id, [responded("call_a", True)])
    response = httpx.post(
        f"{two_asks.url}/api/chat", json=body, headers=approving(token), timeout=30
    )
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "approval_not_found"
    assert logged.count() == before
    assert {s["status"] for s in tools(chat).values()} == {"awaiting-approval"}


def test_a_call_that_expired_meanwhile_is_denied_and_the_rest_streams(
    two_asks: LiveServer, user, token
):
    """QA: one of the answered calls was past its expiry. It is logged denied as expired,
    the other is logged approved and the turn goes on; the answer used to be a 409
    ``approval_expired``, so the client showed a failed request while the turn ran and
    finished without it. Now the rest of the reply streams, the expired call denied."""
    from sessions import services as session_services
    from sessions.models import Part

    chat = "expired"
    asked = ask(two_asks, token, chat)
    row = Part.objects.get(session=chat_session(chat), type="tool", data__call_id="call_a")
    state = row.data["state"]
    approval = {**state["metadata"]["approval"], "expires_at": "2000-01-01T00:00:00.000Z"}
    state = {**state, "metadata": {**state["metadata"], "approval": approval}}
    session_services.update_part(
        session=chat_session(chat), part={"id": row.data["id"], "state": state}
    )
    asked.ui.respond("call_a", True)
    asked.ui.respond("call_b", True)
    reader = answered(
        two_asks, token, chat, asked, [responded("call_a", True), responded("call_b", True)]
    )
    assert reader.finished
    assert reader.ui.finish_reason == "stop"
    states = tools(chat)
    assert states["call_a"]["status"] == "error"
    assert states["call_a"]["metadata"]["approval"]["expired"] is True
    assert states["call_b"]["status"] == "completed"
    shown = {p.get("toolCallId"): p for p in reader.ui.parts if p.get("toolCallId")}
    assert shown["call_a"]["state"] != "approval-responded"  # the stream moved it on
    assert shown["call_b"]["state"] == "output-available"
    assert stored(chat)["info"]["completed_at"] is not None


def test_denying_one_call_while_another_waits_ends_the_stream_at_once(
    tmp_path: Path, agents: Any, user, token
):
    """QA (MEDIUM): denying one call while another of the reply still waits runs nothing
    and took no lease, so no ``idle`` status came, and the answer's stream stayed open
    until the next heartbeat (15 s by default) noticed the reply was suspended. The
    answers publish the session's ``idle`` then; the stream ends with the denial."""
    # No heartbeat ends the stream here: without the fix, a read timeout (30 s).
    with two_asks_daphne(tmp_path, "slowbeat", FORGE_SSE_HEARTBEAT="600") as live:
        chat = "denyone"
        asked = ask(live, token, chat)
        asked.ui.respond("call_b", False)
        reader = answered(live, token, chat, asked, [responded("call_b", False)], timeout=30)
    assert reader.ui.finish_reason == "tool-calls"
    shown = {p.get("toolCallId"): p for p in reader.ui.parts if p.get("toolCallId")}
    assert shown["call_b"]["state"] == "output-denied"
    states = tools(chat)
    assert states["call_a"]["status"] == "awaiting-approval"
    assert states["call_b"]["status"] == "error"
