"""A request whose head daphne cannot take gets an answer that says why.

Twisted reads a request line or header line of at most 16 KiB, and a head of at most
16 KiB in all. Past the first it used to drop the connection without a word (a link
with a 20 KB query string: the browser shows "connection reset"); past the second it
answered a bare ``400 Bad Request`` with no body. Now: 414 for a request line too long,
431 for headers too large, 400 for a request line that does not parse, each with the
API's JSON error and ``Connection: close``, and the server goes on serving.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import httpx
import pytest

from tests.live import LiveServer, daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[LiveServer]:
    with daphne(tmp_path_factory.mktemp("heads")) as live:
        yield live


def _send(port: int, raw: bytes) -> tuple[int, str, dict[str, str], Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer, "the connection was closed without an answer"
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    _, status, reason = status_line.split(" ", 2)
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    assert int(headers["content-length"]) == len(body)
    return int(status), reason, headers, json.loads(body)


def _still_serving(server: LiveServer) -> None:
    assert httpx.get(f"{server.url}/login/", timeout=10).status_code == 200


@pytest.mark.parametrize("length", [16_500, 70_000])
def test_a_request_line_too_long_is_414(server: LiveServer, length: int):
    query = "q=" + "x" * length
    raw = f"GET /api/sessions/?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    status, reason, headers, body = _send(server.port, raw)
    assert (status, reason) == (414, HTTPStatus(414).phrase)  # "URI Too Long" from 3.13
    assert body["error"]["code"] == "uri_too_long"
    assert "16384" in body["error"]["message"]
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    _still_serving(server)


def test_a_header_line_too_long_is_431(server: LiveServer):
    raw = (f"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: a={'y' * 20_000}\r\n\r\n").encode()
    status, reason, _, body = _send(server.port, raw)
    assert (status, reason) == (431, HTTPStatus(431).phrase)
    assert body["error"]["code"] == "headers_too_large"
    _still_serving(server)


def test_headers_too_large_in_all_are_431(server: LiveServer):
    many = "".join(f"X-Filler-{i}: {'z' * 1000}\r\n" for i in range(20))
    raw = f"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n{many}\r\n".encode()
    status, _, _, body = _send(server.port, raw)
    assert status == 431
    assert body["error"]["code"] == "headers_too_large"
    _still_serving(server)


def test_a_request_line_that_does_not_parse_is_a_json_400(server: LiveServer):
    status, reason, _, body = _send(server.port, b"NONSENSE\r\n\r\n")
    assert (status, reason) == (400, "Bad Request")
    assert body["error"]["code"] == "bad_request"
    _still_serving(server)


def test_a_long_request_line_under_the_limit_reaches_the_application(server: LiveServer):
    query = "q=" + "x" * 12_000
    raw = f"GET /api/sessions/?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    raw = raw.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    status, _, _, body = _send(server.port, raw)  # the API's own answer: no token
    assert status == 401
    assert body["error"]["code"] == "not_authenticated"
