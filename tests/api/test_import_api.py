"""``POST /api/sessions/import/`` (issue 17): its body is capped (``FORGE_MAX_IMPORT_BYTES``,
413 before the body is read past the cap: by daphne as it arrives, and by the view),
the caller's tenant is checked before anything is read, an import is always a copy
(an importer never chooses a session id, nor learns whether one exists), and a
broken log is 400 ``log_integrity``, never a 500."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sessions import services
from sessions.models import Session, SessionEvent
from tests.live import LiveServer, daphne

from .conftest import error

LIMIT = 1_000_000  # the daphne's FORGE_MAX_IMPORT_BYTES
NDJSON = "application/x-ndjson"


def _exchange(session: Any) -> None:
    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(session=session, part={"message_id": user, "type": "text", "text": "q"})


def _export(api: Any, session: Any) -> bytes:
    return b"".join(api.get(f"/api/sessions/{session.pk}/export/").streaming_content)


def _import(api: Any, body: bytes, query: str = "") -> Any:
    return api.generic("POST", f"/api/sessions/import/{query}", body, content_type=NDJSON)


# --- in process (the view) -----------------------------------------------------------------


@pytest.mark.django_db
def test_an_import_over_the_limit_is_413_and_writes_nothing(api, session, settings):
    _exchange(session)
    body = _export(api, session)
    settings.FORGE_MAX_IMPORT_BYTES = len(body) - 1
    before = (Session.objects.count(), SessionEvent.objects.count())
    response = _import(api, body)
    assert response.status_code == 413, response.content
    assert error(response)["code"] == "too_large"
    assert f"{len(body) - 1} bytes" in error(response)["message"]
    assert (Session.objects.count(), SessionEvent.objects.count()) == before
    settings.FORGE_MAX_IMPORT_BYTES = len(body)
    assert _import(api, body).status_code == 201


@pytest.mark.django_db
def test_the_callers_tenant_is_checked_before_the_body_is_read(session, tenant):
    """A user in no tenant gets 403 ``no_tenant``, whatever the body (it was a 400 about
    the body: the file was parsed first)."""
    from rest_framework.test import APIClient

    from accounts.models import User

    lonely = User.objects.create_user(username="lonely", password="pw-lonely-123")
    client = APIClient()
    client.force_authenticate(lonely)
    response = _import(client, b"{not an export")
    assert response.status_code == 403, response.content
    assert error(response)["code"] == "no_tenant"


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["", "?copy=0", "?copy=1"])
def test_an_api_import_is_always_a_copy(api, session, query):
    """Even when every id of the log is free: the API never keeps an id the importer
    chose (it could squat or probe ids); ``manage.py import_session`` may."""
    _exchange(session)
    body = _export(api, session)
    head = SessionEvent.objects.filter(session=session).latest("seq")
    source = session.pk
    services.delete_session(session=session)
    response = _import(api, body, query)
    assert response.status_code == 201, response.content
    copy_id = response.json()["id"]
    assert copy_id != source
    assert not Session.objects.filter(pk=source).exists()
    created = SessionEvent.objects.get(session_id=copy_id, seq=1)
    assert created.data["copied_from"] == {
        "session_id": source,
        "head_seq": head.seq,
        "head_hash": head.hash,
    }
    texts = [
        p["text"]
        for item in api.get(f"/api/sessions/{copy_id}/messages/").json()["results"]
        for p in item["parts"]
    ]
    assert texts == ["q"]


# --- through daphne (the server) -------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path, agents: Any) -> Iterator[LiveServer]:
    with daphne(tmp_path, FORGE_MAX_IMPORT_BYTES=str(LIMIT)) as live:
        yield live


def _request_head(port: int, token: str, *framing: str) -> bytes:
    lines = [
        "POST /api/sessions/import/ HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        f"Authorization: Token {token}",
        f"Content-Type: {NDJSON}",
        *framing,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _send_until_answered(port: int, head: bytes, pieces: Iterator[bytes]) -> tuple[bytes, int]:
    """Send ``head``, then ``pieces`` one by one while the server has not answered; stop
    as soon as it does. Returns the answer and how many body bytes were sent."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        for piece in pieces:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            sock.sendall(piece)
            sent += len(piece)
        else:
            raise AssertionError(f"the whole body ({sent} bytes) was sent with no answer")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer, sent


def _answer_of(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


@pytest.mark.django_db(transaction=True)
def test_daphne_answers_413_to_a_content_length_over_the_limit_before_reading_the_body(
    server: LiveServer, token: str
):
    announced = 200 * 1024 * 1024  # the 199 MB import of the issue
    piece = b"x" * 65536
    answer, sent = _send_until_answered(
        server.port,
        _request_head(server.port, token, f"Content-Length: {announced}"),
        iter([piece] * (announced // len(piece))),
    )
    status, body = _answer_of(answer)
    assert status == 413, answer[:300]
    assert body["error"]["code"] == "too_large"
    assert sent < announced // 10  # answered while the client was still sending
    assert "refused a request body" in server.output()
    # The server goes on serving.
    auth = {"Authorization": f"Token {token}"}
    assert httpx.get(f"{server.url}/api/sessions/", headers=auth, timeout=10).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_daphne_counts_a_chunked_body_and_answers_413_once_it_passes_the_limit(
    server: LiveServer, token: str
):
    data = b"y" * 65536
    piece = f"{len(data):x}\r\n".encode() + data + b"\r\n"
    planned = 200 * 1024 * 1024
    answer, sent = _send_until_answered(
        server.port,
        _request_head(server.port, token, "Transfer-Encoding: chunked"),
        iter([piece] * (planned // len(piece))),
    )
    status, body = _answer_of(answer)
    assert status == 413, answer[:300]
    assert body["error"]["code"] == "too_large"
    assert LIMIT < sent < planned // 10


@pytest.mark.django_db(transaction=True)
def test_daphne_imports_a_file_under_the_limit_with_a_length_or_chunked(
    server: LiveServer, api, session, token: str
):
    _exchange(session)
    body = _export(api, session)
    auth = {"Authorization": f"Token {token}", "Content-Type": NDJSON}
    url = f"{server.url}/api/sessions/import/"
    with_length = httpx.post(url, content=body, headers=auth, timeout=30)
    assert with_length.status_code == 201, with_length.text
    chunked = httpx.post(url, content=iter([body[:100], body[100:]]), headers=auth, timeout=30)
    assert chunked.status_code == 201, chunked.text
    for copy in (with_length.json()["id"], chunked.json()["id"]):
        assert Session.objects.get(pk=copy).tenant_id == session.tenant_id
    # Other routes and methods keep their bodies, and the server still answers.
    assert httpx.get(f"{server.url}/api/sessions/", headers=auth, timeout=10).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_daphne_refuses_any_body_over_its_routes_limit_as_it_arrives(server: LiveServer):
    """A third-round finding: only the import route had a limit applied as the body
    arrived; a 600 MB POST to the login page, signed in or not, was read whole (the
    process grew by 400 MB) before Django's own 16 MiB check refused it."""
    announced = 200 * 1024 * 1024
    piece = b"x" * 65536
    head = (
        "POST /login/ HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{server.port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {announced}\r\n\r\n"
    ).encode()
    answer, sent = _send_until_answered(
        server.port, head, iter([piece] * (announced // len(piece)))
    )
    status, body = _answer_of(answer)
    assert (status, body["error"]["code"]) == (413, "too_large")
    assert sent < announced // 10


@pytest.mark.django_db(transaction=True)
def test_daphne_refuses_an_anonymous_import_over_the_general_limit_at_once(
    tmp_path: Path, agents: Any
):
    """A fourth-round finding: an import without credentials had its whole body (up to
    FORGE_MAX_IMPORT_BYTES, 64 MiB) read before its 401: eight at once grew the process
    by 100 MB. Now the general limit applies to it, on the headers."""
    from django.conf import settings

    announced = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) + 4 * 1024 * 1024
    piece = b"{}" * 32768
    with daphne(tmp_path, FORGE_MAX_IMPORT_BYTES=str(4 * announced)) as live:
        head = (
            "POST /api/sessions/import/ HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{live.port}\r\n"
            f"Content-Type: {NDJSON}\r\n"
            f"Content-Length: {announced}\r\n\r\n"
        ).encode()
        answer, sent = _send_until_answered(
            live.port, head, iter([piece] * (announced // len(piece)))
        )
    status, body = _answer_of(answer)
    assert (status, body["error"]["code"]) == (413, "too_large")
    assert sent < announced // 4  # answered on the headers, not after the body


def test_each_route_has_its_limit(settings):
    from forge.runtime.prompting import MAX_FILE_BYTES, MAX_FILES
    from forge.server_limits import limit_for

    settings.FORGE_MAX_IMPORT_BYTES = 5_000_000
    assert limit_for(b"POST", b"/api/sessions/import/?copy=1") == 5_000_000
    prompt = limit_for("POST", "/api/sessions/ses_x/messages/?wait=1")
    assert prompt is not None
    assert prompt > MAX_FILES * MAX_FILE_BYTES * 4 // 3  # ten files at their limit fit
    assert limit_for("POST", "/api/chat") == prompt
    assert limit_for("POST", "/login/") == settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert limit_for("PATCH", "/api/sessions/ses_x/") == settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert limit_for("GET", "/api/sessions/ses_x/messages/") == settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    # Without credentials the import and prompt routes answer 401: the general limit.
    general = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert limit_for(b"POST", b"/api/sessions/import/", signed=False) == general
    assert limit_for("POST", "/api/chat", signed=False) == general
