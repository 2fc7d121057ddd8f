"""A client that stops reading is cut by a real daphne, and resumes missing nothing.

Each test opens a stream on a raw socket with a small receive buffer and reads
nothing while replies of ~100 KB stream; the server must cut the connection
(``FORGE_STREAM_STALL_SECONDS``) instead of buffering for it without end. The test
then reads what did arrive before the cut, and a fresh client resuming after the
last seq it holds gets every later durable event, in order.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sessions.models import SessionEvent
from tests.live import LiveServer, daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

STALL = "1.5"
REPLIES = 60
# ~95 KB per reply, in long words: few deltas, large frames (the user's message, the
# reply's deltas and its finished part each carry the whole text).
PROMPT = " ".join(f"{n:04d}" + "x" * 995 for n in range(95))


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Token {token}"}


def stalled_socket(server: LiveServer, request: bytes) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(request)
    return sock


def reply_many(server: LiveServer, session_id: str, token: str) -> int:
    """Stream REPLIES replies (each prompt waits for its reply); the log's head seq."""
    with httpx.Client(timeout=60) as client:
        for _ in range(REPLIES):
            answer = client.post(
                f"{server.url}/api/sessions/{session_id}/messages/?wait=1",
                json={"text": PROMPT},
                headers=headers(token),
            )
            assert answer.status_code == 200, answer.text
    return int(SessionEvent.objects.filter(session_id=session_id).count())


def still_reading_nothing(server: LiveServer, *, within: float = 30.0) -> None:
    """Go on reading nothing until the server says it cut a slow client. The replies
    alone may not last the stall: a fast machine streamed all 60 in 2.2 s, and the
    kernel took a little more of the stalled stream once, 1.2 s in (its receive
    queue collapsed), which counts as the buffer draining (a CI pass failed so)."""
    deadline = time.monotonic() + within
    while "cut a slow client" not in server.output():
        if time.monotonic() > deadline:
            pytest.fail(f"the server never cut a client that read nothing:\n{server.output()}")
        time.sleep(0.1)


def read_until_cut(sock: socket.socket, *, within: float = 30.0) -> bytes:
    """Everything the server sent before it cut the connection. A connection still open
    once ``within`` seconds passed (data still coming, or nothing) fails the test."""
    sock.settimeout(10)
    received = bytearray()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return bytes(received)
        except TimeoutError:
            break
        if not chunk:
            return bytes(received)
        received += chunk
    pytest.fail(f"the server never cut a client that read nothing ({len(received)} bytes read)")


def sse_seqs(raw: bytes) -> list[int]:
    """The ids of the complete SSE events in ``raw`` (the response's head and chunked
    framing left in: an event's lines are whole within one chunk)."""
    seqs = []
    for block in raw.split(b"\n\n")[:-1]:  # the last one may be cut short
        for line in block.split(b"\n"):
            if line.startswith(b"id: "):
                seqs.append(int(line[4:]))
    return seqs


def ws_seqs(raw: bytes) -> list[int]:
    """The seqs of the complete durable event frames in ``raw`` (a 101 head, then
    unmasked server frames)."""
    data = raw[raw.index(b"\r\n\r\n") + 4 :]
    seqs = []
    at = 0
    while at + 2 <= len(data):
        opcode, length = data[at] & 0x0F, data[at + 1] & 0x7F
        at += 2
        if length == 126:
            if at + 2 > len(data):
                break
            (length,) = struct.unpack("!H", data[at : at + 2])
            at += 2
        elif length == 127:
            if at + 8 > len(data):
                break
            (length,) = struct.unpack("!Q", data[at : at + 8])
            at += 8
        if at + length > len(data):
            break
        if opcode == 1:
            frame = json.loads(data[at : at + length])
            if frame.get("kind") == "event":
                seqs.append(frame["seq"])
        at += length
    return seqs


def resume_over_sse(server: LiveServer, session_id: str, token: str, after: int, head: int):
    """The seqs a fresh SSE client resuming after ``after`` receives, up to ``head``."""
    seqs: list[int] = []
    url = f"{server.url}/api/sessions/{session_id}/stream/?after={after}"
    with (
        httpx.Client(timeout=30) as client,
        client.stream("GET", url, headers=headers(token)) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("id: "):
                seqs.append(int(line[4:]))
                if seqs[-1] >= head:
                    break
    return seqs


def check_cut_and_resume(server: LiveServer, received: list[int], session, token, head) -> None:
    assert received == list(range(1, len(received) + 1))  # what arrived: in order, no gap
    assert received[-1] < head  # it was cut before the end (it read nothing meanwhile)
    resumed = resume_over_sse(server, session.pk, token, received[-1], head)
    assert resumed == list(range(received[-1] + 1, head + 1))
    assert "cut a slow client" in server.output()


def test_an_sse_client_that_stops_reading_is_cut_and_resumes(
    tmp_path: Path, session: Any, token: str, agents: Any
) -> None:
    with daphne(tmp_path, FORGE_STREAM_STALL_SECONDS=STALL) as server:
        sock = stalled_socket(
            server,
            (
                f"GET /api/sessions/{session.pk}/stream/ HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{server.port}\r\nAuthorization: Token {token}\r\n\r\n"
            ).encode(),
        )
        with sock:
            head = reply_many(server, session.pk, token)
            still_reading_nothing(server)
            raw = read_until_cut(sock)
        assert raw.startswith(b"HTTP/1.1 200")
        check_cut_and_resume(server, sse_seqs(raw), session, token, head)


def test_a_socket_that_stops_reading_is_cut_and_resumes(
    tmp_path: Path, session: Any, token: str, agents: Any
) -> None:
    with daphne(tmp_path, FORGE_STREAM_STALL_SECONDS=STALL) as server:
        key = base64.b64encode(os.urandom(16)).decode()
        sock = stalled_socket(
            server,
            (
                f"GET /ws/sessions/{session.pk}/?after=0 HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{server.port}\r\nOrigin: {server.url}\r\n"
                f"Authorization: Token {token}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode(),
        )
        with sock:
            head = reply_many(server, session.pk, token)
            still_reading_nothing(server)
            raw = read_until_cut(sock)
        assert raw.startswith(b"HTTP/1.1 101")
        check_cut_and_resume(server, ws_seqs(raw), session, token, head)
