"""``POST /api/chat`` and its routes (issue 17): chat ids are per tenant, and a file
holding a NUL is stored as a file, under a real daphne (as the application role of
row-level security on the server stack)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from accounts.selectors import tenant_for_user
from sessions import selectors
from sessions.models import Session, SessionEvent
from tests.live import LiveServer, daphne

from .test_chat_routes import chat_body, headers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def echo(tmp_path: Path, agents: Any) -> Any:
    with daphne(tmp_path, "echo", FORGE_ECHO_DELAY="0.001") as live:
        yield live


def chat(live: LiveServer, token: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{live.url}/api/chat", json=body, headers=headers(token), timeout=30)


def prompts(session: Session) -> list[str]:
    return [
        item["parts"][0]["text"]
        for item in selectors.iter_history(tenant=session.tenant, session_id=session.pk)
        if item["info"]["role"] == "user"
    ]


def test_a_chat_id_another_tenant_chose_first_is_yours_too(
    echo: LiveServer, user, other_user, token, stranger_token
):
    """It was a 404 for its rightful owner: the chat id was the session's id, unique in
    the whole database, so whoever chose it first held it (and others saw it was
    taken). Now each tenant has its own chat under the same id."""
    first = chat(echo, stranger_token, chat_body("shared1", "from tenant B"))
    assert first.status_code == 200, first.text
    mine = chat(echo, token, chat_body("shared1", "from tenant A"))
    assert mine.status_code == 200, mine.text
    assert mine.text.endswith("data: [DONE]\n\n")

    sessions = {s.tenant_id: s for s in Session.objects.filter(chat_alias="shared1")}
    ours, theirs = sessions[tenant_for_user(user).pk], sessions[tenant_for_user(other_user).pk]
    assert ours.pk != theirs.pk
    assert "shared1" not in (ours.pk, theirs.pk)  # ids are minted by the server
    assert (ours.user, theirs.user) == (user, other_user)
    assert prompts(ours) == ["from tenant A"]
    assert prompts(theirs) == ["from tenant B"]

    # Every route of the chat resolves the id in the caller's tenant.
    again = chat(echo, token, chat_body("shared1", "again"))
    assert again.status_code == 200
    assert prompts(ours) == ["from tenant A", "again"]
    assert prompts(theirs) == ["from tenant B"]
    for who, session in ((token, ours), (stranger_token, theirs)):
        listed = httpx.get(f"{echo.url}/api/chat/shared1/messages", headers=headers(who))
        assert listed.status_code == 200
        ids = [m["id"] for m in listed.json()["results"]]
        assert ids == [
            i["info"]["id"]
            for i in selectors.iter_history(tenant=session.tenant, session_id=session.pk)
        ]
        assert httpx.get(f"{echo.url}/api/chat/shared1/stream", headers=headers(who)).status_code
        stop = httpx.post(f"{echo.url}/api/chat/shared1/stop", headers=headers(who))
        assert (stop.status_code, stop.json()["error"]["code"]) == (409, "not_running")


def test_another_tenants_session_id_as_a_chat_id_is_a_new_chat_and_never_theirs(
    echo: LiveServer, session, token, stranger_token
):
    """Whether an id exists elsewhere is never observable: another tenant's session id
    answers exactly as a fresh id does (a new chat of one's own), and the session it
    names is never touched."""
    before = SessionEvent.objects.filter(session=session).count()
    for chat_id in (session.pk, "neverSeenBefore"):
        answer = chat(echo, stranger_token, chat_body(chat_id, "mine"))
        assert answer.status_code == 200, answer.text
        created = Session.objects.get(chat_alias=chat_id)
        assert created.tenant_id != session.tenant_id
        assert prompts(created) == ["mine"]
    assert SessionEvent.objects.filter(session=session).count() == before
    # The owner's own routes still name their session by its id.
    assert (
        httpx.get(f"{echo.url}/api/chat/{session.pk}/stream", headers=headers(token)).status_code
        == 204
    )
    theirs = httpx.get(
        f"{echo.url}/api/chat/{session.pk}/messages", headers=headers(stranger_token)
    )
    assert [m["role"] for m in theirs.json()["results"]] == ["user", "assistant"]
    mine = httpx.get(f"{echo.url}/api/chat/{session.pk}/messages", headers=headers(token))
    assert mine.json()["results"] == []


def _file_part(data: bytes, media_type: str = "text/plain", name: str = "notes.txt") -> dict:
    return {
        "type": "file",
        "mediaType": media_type,
        "filename": name,
        "url": f"data:{media_type};base64,{base64.b64encode(data).decode()}",
    }


def test_a_text_file_holding_a_nul_is_stored_as_a_file_and_the_chat_answers(
    echo: LiveServer, user, token, settings
):
    """It was a 500 on PostgreSQL, and left an empty chat behind."""
    body = chat_body("nulChat")
    body["messages"][-1]["parts"].append(_file_part(b"abc\x00def", name="bin\x00ary.txt"))
    answer = chat(echo, token, body)
    assert answer.status_code == 200, answer.text
    assert answer.text.endswith("data: [DONE]\n\n")
    session = Session.objects.get(chat_alias="nulChat")
    prompt = next(iter(selectors.iter_history(tenant=session.tenant, session_id=session.pk)))
    # No inlined text: the file is put in the workspace, and the note says where.
    assert sorted(p["type"] for p in prompt["parts"]) == ["file", "text", "text"]
    (note,) = [p for p in prompt["parts"] if p.get("synthetic")]
    assert 'workspace_path="uploads/bin_ary.txt"' in note["text"]
    (file,) = [p for p in prompt["parts"] if p["type"] == "file"]
    assert (file["filename"], file["mime"]) == ("bin_ary.txt", "text/plain")


def test_a_media_type_holding_a_nul_is_400_and_creates_no_chat(echo: LiveServer, user, token):
    body = chat_body("badType")
    body["messages"][-1]["parts"].append(_file_part(b"hello", media_type="text/plain\x00"))
    answer = chat(echo, token, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_prompt"
    assert not Session.objects.exists()


def test_a_chat_takes_attachments_past_djangos_body_limit_as_multipart_would(
    echo: LiveServer, user, token, settings
):
    """QA (MEDIUM): a prompt route takes ten attachments at their limit, but two 7 MB
    files sent as JSON were a 413 naming ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (DRF read the
    JSON through ``request.body``, capped at Django's 16 MiB)."""
    import os

    body = chat_body("bigFiles")
    payloads = [os.urandom(7_000_000) for _ in range(2)]
    body["messages"][-1]["parts"] += [
        _file_part(data, media_type="application/octet-stream", name=f"f{i}.bin")
        for i, data in enumerate(payloads)
    ]
    answer = chat(echo, token, body)
    assert answer.status_code == 200, answer.text[:300]
    session = Session.objects.get(chat_alias="bigFiles")
    prompt = next(iter(selectors.iter_history(tenant=session.tenant, session_id=session.pk)))
    assert sorted(p["filename"] for p in prompt["parts"] if p["type"] == "file") == [
        "f0.bin",
        "f1.bin",
    ]


@pytest.mark.parametrize(("field", "value"), [("mediaType", 5), ("filename", ["a.txt"])])
def test_a_file_part_field_of_the_wrong_type_is_refused(field: str, value: Any):
    """QA: ``mediaType: 5`` was logged as no type, ``filename: 5`` as ``file-1``."""
    from rest_framework.exceptions import ValidationError

    from forge.aisdk.bodies import prompt_of

    body = chat_body("typed")
    body["messages"][-1]["parts"].append({**_file_part(b"hello"), field: value})
    with pytest.raises(ValidationError, match=f"{field} must be a string"):
        prompt_of(body)
    body["messages"][-1]["parts"][-1].pop(field)  # absent: the data URL's type, file-1
    _text, (attachment,) = prompt_of(body)
    named = "file-1" if field == "filename" else "notes.txt"
    assert (attachment.filename, attachment.mime) == (named, "text/plain")


def test_files_without_text_are_refused_for_the_missing_text():
    """``sendMessage({files})`` with no text is refused; the message says that files
    alone are no prompt (QA LOW: "a prompt needs some text" left a user who had sent
    a file wondering whether the file was taken)."""
    from forge.aisdk.bodies import prompt_of
    from forge.errors import InvalidPrompt
    from forge.runtime.prompting import clean_text

    body = chat_body("filesOnly")
    body["messages"][-1]["parts"] = [_file_part(b"hello")]

    text, files = prompt_of(body)
    assert len(files) == 1
    with pytest.raises(InvalidPrompt, match="files alone are not a prompt"):
        clean_text(text)
