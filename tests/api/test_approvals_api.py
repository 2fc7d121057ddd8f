"""POST /api/sessions/{id}/approvals/{call_id}/ and pending_approvals (docs/approvals.md).

The test client runs no server loop: an answer that goes on with the turn runs it
to its end before the response (``runtime.answer_sync``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtime.test_turns import text_reply, tool_reply

from .conftest import error

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

WRITE = '{"path": "notes.txt", "content": "hi"}'


@pytest.fixture
def waiting(session: Any, api: Any, agents: Any, settings: Any, script: Any) -> str:
    """A session whose reply waits for an answer to ``call_1``; returns its URL."""
    settings.FORGE_TOOL_APPROVAL = {"write_file": "ask"}
    script([tool_reply("write_file", WRITE), text_reply("done now")])
    url = f"/api/sessions/{session.pk}/"
    response = api.post(url + "messages/?wait=1", {"text": "write"}, format="json")
    assert response.status_code == 200, response.content
    return url


def test_the_session_shows_its_pending_approvals_and_an_answer_goes_on(api, waiting):
    body = api.get(waiting).json()
    [pending] = body["pending_approvals"]
    assert pending["call_id"] == "call_1"
    assert pending["tool"] == "write_file"
    assert pending["input"] == {"path": "notes.txt", "content": "hi"}
    assert pending["expires_at"]
    response = api.post(waiting + "approvals/call_1/", {"approve": True}, format="json")
    assert response.status_code == 202, response.content
    assert api.get(waiting).json()["pending_approvals"] == []
    items = api.get(waiting + "messages/").json()["results"]
    reply = items[-1]
    assert reply["info"]["completed_at"]
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["done now"]
    tool = next(p for p in reply["parts"] if p["type"] == "tool")
    assert tool["state"]["status"] == "completed"


def test_a_second_answer_is_409(api, waiting):
    assert (
        api.post(waiting + "approvals/call_1/", {"approve": False}, format="json").status_code
        == 202
    )
    response = api.post(waiting + "approvals/call_1/", {"approve": True}, format="json")
    assert response.status_code == 409
    assert error(response)["code"] == "approval_answered"


def test_an_unknown_call_is_404(api, waiting):
    response = api.post(waiting + "approvals/call_9/", {"approve": True}, format="json")
    assert response.status_code == 404
    assert error(response)["code"] == "approval_not_found"


def test_another_tenant_is_404(stranger, waiting):
    response = stranger.post(waiting + "approvals/call_1/", {"approve": True}, format="json")
    assert response.status_code == 404
    assert error(response)["code"] == "not_found"  # as for any session it cannot see


def test_a_reason_holding_a_nul_says_so(api, waiting):
    body = {"approve": True, "reason": "a\u0000b"}
    response = api.post(waiting + "approvals/call_1/", body, format="json")
    assert response.status_code == 400
    assert error(response)["message"] == "reason must not hold a NUL character"


@pytest.mark.parametrize(
    "body", [{}, {"approve": "yes"}, {"approve": 1}, [True], {"approve": True, "reason": 5}]
)
def test_a_malformed_body_is_400_and_logs_nothing(api, waiting, body):
    response = api.post(waiting + "approvals/call_1/", body, format="json")
    assert response.status_code == 400, response.content
    assert error(response)["code"] in ("invalid_answer", "invalid")
    assert [p["call_id"] for p in api.get(waiting).json()["pending_approvals"]] == ["call_1"]


def test_an_answer_after_expiry_is_409(api, waiting, settings, session):
    from django.db import transaction

    # Make the wait overdue: rewrite its expiry through the log (as a real wait would be).
    from sessions import services
    from sessions.models import Part

    part = Part.objects.get(session=session, type="tool").data
    state = {**part["state"], "metadata": {"approval": {"expires_at": "2000-01-01T00:00:00.000Z"}}}
    with transaction.atomic():
        services.update_part(session=session, part={"id": part["id"], "state": state})
    response = api.post(waiting + "approvals/call_1/", {"approve": True}, format="json")
    assert response.status_code == 409
    assert error(response)["code"] == "approval_expired"
    tool = next(
        p
        for p in api.get(waiting + "messages/").json()["results"][-1]["parts"]
        if p["type"] == "tool"
    )
    assert tool["state"]["metadata"]["approval"]["expired"] is True


def test_abort_of_a_reply_that_only_waits_denies_its_call_and_ends_it(api, waiting):
    """Pressing stop on a reply waiting for an answer stops it (it was 409 not_running,
    and the reply stayed open): 200, the call denied as aborted, the reply aborted."""
    response = api.post(waiting + "abort/")
    assert response.status_code == 200, response.content
    assert response.json()["aborted"] is True
    assert response.json()["session"]["status"] == "idle"
    assert api.get(waiting).json()["pending_approvals"] == []
    reply = api.get(waiting + "messages/").json()["results"][-1]
    assert reply["info"]["completed_at"]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    tool = next(p for p in reply["parts"] if p["type"] == "tool")
    assert tool["state"]["metadata"]["denied"] is True
    assert tool["state"]["metadata"]["approval"]["reason"] == "aborted"
    answer = api.post(waiting + "approvals/call_1/", {"approve": True}, format="json")
    assert answer.status_code == 409
    assert error(answer)["code"] == "approval_answered"
    assert [p["type"] for p in reply["parts"]].count("step-start") == 1  # no step ran after
    again = api.post(waiting + "abort/")
    assert again.status_code == 409
    assert error(again)["code"] == "not_running"


def test_an_imported_reply_goes_on_with_a_model_this_server_configures(api, waiting):
    """QA (MEDIUM): a reply resumed by an answer ran on the model its ``info.model``
    names, which an imported log says as it likes: a member imported a waiting call
    under any model name and, answering it, had the server call that model (with the
    server's key, unpriced, so outside every cost budget). A model no agent and no
    setting of this server names is the reply's agent's own (here ``offline/script``:
    "done now"; ``offline/echo`` would have echoed the prompt)."""

    from tests.api.test_transfer import exported_lines, import_tampered

    lines = exported_lines(api, waiting.rstrip("/").rsplit("/", 1)[-1])
    for event in lines[1:]:
        if event["type"] == "message.updated" and event["data"]["role"] == "assistant":
            event["data"]["model"] = {"provider": "offline", "model": "echo"}
    imported = import_tampered(api, lines)
    assert imported.status_code == 201, imported.content
    copy = f"/api/sessions/{imported.json()['id']}/"
    [pending] = api.get(copy).json()["pending_approvals"]
    answer = api.post(copy + f"approvals/{pending['call_id']}/", {"approve": True}, format="json")
    assert answer.status_code == 202, answer.content
    reply = api.get(copy + "messages/").json()["results"][-1]
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["done now"]


def test_an_imported_reply_goes_on_with_the_model_this_server_sends(api, waiting, monkeypatch):
    """The resumed step's request took its model name from the log's ``settings``
    context block, which an import writes as it likes: the turn ran on the agent's
    model (``turn_of``), but the provider was sent the imported block's name (the
    OpenAI provider sends ``request.model``: any model, with the server's key, priced
    as the agent's). The request names the turn's model."""
    import json

    from forge.providers.offline import ScriptProvider
    from tests.api.test_transfer import _rehash

    body = b"".join(api.get(waiting + "export/").streaming_content)
    lines = [json.loads(line) for line in body.splitlines()]
    for event in lines[1:]:
        if event["type"] == "context.updated":
            for block in event["data"]["blocks"]:
                if block.get("kind") == "settings":
                    block["model"] = "offline/gpt-imported"
    imported = api.generic(
        "POST",
        "/api/sessions/import/",
        "\n".join(json.dumps(line) for line in _rehash(lines)).encode(),
        content_type="application/x-ndjson",
    )
    assert imported.status_code == 201, imported.content
    sent: list[str] = []
    stream = ScriptProvider.stream

    def recording(self, request):
        sent.append(request.model)
        return stream(self, request)

    monkeypatch.setattr(ScriptProvider, "stream", recording)
    copy = f"/api/sessions/{imported.json()['id']}/"
    [pending] = api.get(copy).json()["pending_approvals"]
    answer = api.post(copy + f"approvals/{pending['call_id']}/", {"approve": True}, format="json")
    assert answer.status_code == 202, answer.content
    assert sent == ["script"]
