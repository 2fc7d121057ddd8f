"""NUL characters (U+0000) through the faces (issue 17, MEDIUM 5): a text file holding
one is stored as a file, and every other text that would reach the database with
one is a 400 (or an error frame), never a 500 from PostgreSQL's ``DataError``."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from sessions.models import Session, SessionEvent

from .conftest import error
from .test_socket import backlog, socket

pytestmark = pytest.mark.django_db(transaction=True)

BINARY_TEXT = b"header\x00\x01\x02 and more"


def _stored_bytes(part: dict[str, Any], settings: Any) -> bytes:
    from forge.tools.session_files import stored_file
    from sessions.models import Session

    session = Session.objects.get(pk=part["session_id"])
    assert part["url"] == f"/api/sessions/{session.pk}/files/{part['id']}/"  # served there
    path = stored_file(tenant_id=session.tenant_id, session_id=session.pk, part_id=part["id"])
    assert path is not None
    return default_storage.open(path).read()


def _as_json(api: Any, session: Any, **file: Any) -> Any:
    file = {"filename": "notes.txt", "mime": "text/plain", **file}
    file["content"] = base64.b64encode(file.get("content", BINARY_TEXT)).decode()
    return api.post(
        f"/api/sessions/{session.pk}/messages/?wait=1",
        {"text": "read this", "files": [file]},
        format="json",
    )


def _as_form(api: Any, session: Any) -> Any:
    upload = SimpleUploadedFile("notes.txt", BINARY_TEXT, content_type="text/plain")
    return api.post(
        f"/api/sessions/{session.pk}/messages/?wait=1",
        {"text": "read this", "files": [upload]},
        format="multipart",
    )


@pytest.mark.parametrize("send", [_as_json, _as_form], ids=["json", "multipart"])
def test_a_text_file_holding_a_nul_is_stored_as_a_file(api, session, agents, settings, send):
    """It was a 500 on PostgreSQL: the file's text went into the log as a synthetic part."""
    settings.FORGE_MODEL = "offline/echo"
    response = send(api, session)
    assert response.status_code == 200, response.content
    parts = response.json()["message"]["parts"]
    # Not inlined (the log stores no NUL): put in the workspace, and the note says where.
    assert [p["type"] for p in parts] == ["text", "file", "text"]
    assert 'workspace_path="uploads/notes.txt"' in parts[2]["text"]
    assert (parts[1]["filename"], parts[1]["mime"]) == ("notes.txt", "text/plain")
    assert _stored_bytes(parts[1], settings) == BINARY_TEXT
    assert response.json()["reply"]["info"]["error"] is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"text": "hi", "agent": "bu\x00ild"}, "invalid"),
        (
            {"text": "hi", "files": [{"filename": "a.txt", "mime": "text/\x00", "content": ""}]},
            "invalid",
        ),
        (
            {"text": "hi", "files": [{"filename": "a\x00.txt", "content": ""}]},
            "invalid",
        ),
        ({"text": "hi \x00 there"}, "invalid"),
    ],
    ids=["agent", "mime", "filename", "text"],
)
def test_a_prompt_holding_a_nul_is_400_and_writes_nothing(api, session, agents, body, code):
    before = SessionEvent.objects.count()
    response = api.post(f"/api/sessions/{session.pk}/messages/", body, format="json")
    assert response.status_code == 400, response.content
    assert error(response)["code"] == code
    assert SessionEvent.objects.count() == before


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("patch", {"title": "a\x00b"}),
        ("patch", {"agent": "\x00"}),
        ("post", {"title": "a\x00b"}),
        ("post", {"agent": "x\x00"}),
    ],
    ids=["rename", "change-agent", "create-title", "create-agent"],
)
def test_a_session_title_or_agent_holding_a_nul_is_400(api, session, agents, method, body):
    url = f"/api/sessions/{session.pk}/" if method == "patch" else "/api/sessions/"
    sessions, events = Session.objects.count(), SessionEvent.objects.count()
    response = getattr(api, method)(url, body, format="json")
    assert response.status_code == 400, response.content
    assert error(response)["code"] == "invalid"
    assert (Session.objects.count(), SessionEvent.objects.count()) == (sessions, events)


async def test_a_socket_prompt_naming_an_agent_with_a_nul_gets_an_error_frame(
    session, token, agents
):
    """The agent's name reached PostgreSQL in a lookup (a ``DataError``)."""
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)  # session.created, then the status
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "hi", "agent": "bu\x00ild"}))
    reply = json.loads(await ws.receive_from(timeout=5))
    assert (reply["kind"], reply["code"]) == ("error", "unknown_agent")
    await ws.send_to(text_data=json.dumps({"type": "ping"}))
    assert json.loads(await ws.receive_from()) == {"kind": "pong"}
    await ws.disconnect()
    assert await database_sync_to_async(session.events.count)() == 1


LONE = "\ud800"  # half a UTF-16 surrogate pair: JSON's "\ud800" decodes to it


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("post", "messages", {"text": f"hi {LONE} there"}),
        ("post", "messages", {"text": "hi", "agent": f"bu{LONE}ild"}),
        ("post", "messages", {"text": "hi", "files": [{"filename": f"{LONE}.txt", "content": ""}]}),
        ("post", "sessions", {"title": f"a{LONE}b"}),
        ("patch", "session", {"title": f"a{LONE}b"}),
        ("patch", "session", {f"ti{LONE}tle": "x"}),
    ],
    ids=["prompt", "agent", "filename", "create-title", "rename", "key"],
)
def test_a_lone_surrogate_in_a_json_body_is_400_and_writes_nothing(
    api, session, agents, method, url, body
):
    """DRF's JSON parser accepts ``"\\ud800"``; no UTF-8 text holds what it decodes to,
    so a title holding one failed the log's hash (a 500) and an agent's name reached the
    database. The parser refuses it anywhere in a body, as the API refuses NUL."""
    path = {
        "messages": f"/api/sessions/{session.pk}/messages/",
        "sessions": "/api/sessions/",
        "session": f"/api/sessions/{session.pk}/",
    }[url]
    sessions, events = Session.objects.count(), SessionEvent.objects.count()
    raw = json.dumps(body)  # ASCII: the surrogate as an escape, as a browser sends it
    assert "\\ud800" in raw
    response = getattr(api, method)(path, raw, content_type="application/json")
    assert response.status_code == 400, response.content
    assert error(response)["code"] == "invalid"
    assert "lone surrogate" in error(response)["message"]
    assert (Session.objects.count(), SessionEvent.objects.count()) == (sessions, events)


def test_a_surrogate_pair_in_a_json_body_is_text(api, session):
    response = api.patch(
        f"/api/sessions/{session.pk}/",
        json.dumps({"title": "smile \U0001f600"}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert Session.objects.get(pk=session.pk).title == "smile \U0001f600"


async def test_a_socket_frame_holding_a_lone_surrogate_gets_an_error_frame(session, token, agents):
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)  # session.created, then the status
    for frame, code, extra in (
        ({"type": "prompt", "text": "hi", "agent": f"bu{LONE}ild"}, "invalid_prompt", {}),
        (
            {"type": "prompt", "text": "hi", "client_id": "c1", "files": [{"mime": f"t/{LONE}"}]},
            "invalid_prompt",
            {"client_id": "c1"},
        ),
        ({"type": "prompt", "text": "hi", "client_id": LONE}, "invalid_prompt", {}),
        (
            {"type": "approval", "call_id": "x", "approve": False, "reason": LONE},
            "invalid_answer",
            {"call_id": "x"},
        ),
        ({"type": "snapshot", LONE: 1}, "bad_frame", {}),
    ):
        await ws.send_to(text_data=json.dumps(frame))
        reply = json.loads(await ws.receive_from(timeout=5))
        assert (reply["kind"], reply["code"]) == ("error", code), reply
        assert "lone surrogate" in reply["message"]
        assert extra.items() <= reply.items()
    await ws.send_to(text_data=json.dumps({"type": "ping"}))
    assert json.loads(await ws.receive_from()) == {"kind": "pong"}
    await ws.disconnect()
    assert await database_sync_to_async(session.events.count)() == 1
