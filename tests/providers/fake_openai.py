"""A fake OpenAI Chat Completions server: real HTTP on 127.0.0.1, scripted per request.

It speaks ``POST /v1/chat/completions`` with ``stream: true`` the way OpenAI does:
HTTP/1.1, ``text/event-stream`` in a chunked body, one ``data: {chat.completion.chunk}``
event per chunk, then ``data: [DONE]``. Each request takes the next scripted
reply from a queue:

* :class:`Stream`: chunks (dicts are sent as JSON, strings as the raw data line,
  so ``"{not json"`` makes a malformed chunk), optionally slowly (``delay``) or
  ending by dropping the connection (``drop``: no ``[DONE]``, no end of body);
* :class:`Status`: an HTTP error with OpenAI's JSON error body and headers
  (``retry-after`` …).

Every request body is recorded (``requests``, with ``headers``; ``on_request`` is
called for each), and ``disconnected`` is set when a client goes away in the
middle of a stream.
:func:`reply` builds a realistic stream from text, reasoning and tool calls.

It also speaks ``POST /v1/embeddings`` (OpenAI's ``{"object": "list", "data":
[{"object": "embedding", "index", "embedding"}], "model", "usage"}``), answering
each text with :func:`fake_vector` (deterministic, so a test can check which
vector came back for which text), as ``float`` lists or ``base64`` as the request
asks. ``fake.embeddings`` (:class:`Embeddings`) switches its faults: ``delay``
(slower than a client's timeout), ``dim`` (answer another width than asked),
``corrupt`` (``"nan"``, ``"null"``, ``"malformed"``, ``"short"``), ``status``
(an HTTP error) and ``reverse`` (items out of order). Embedding request bodies are
also in ``embedding_requests``. A stopped server refuses connections.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-fake"


@dataclass
class Stream:
    """A 200 streamed reply."""

    chunks: list[dict[str, Any] | str]
    done: bool = True  # send "data: [DONE]" at the end
    drop: bool = False  # after the chunks, close the socket mid-body
    delay: float = 0.0  # seconds before each chunk
    # After the chunks, stay open this long before ending (cut short when the server
    # stops), silent or, with ``ping``, sending an SSE comment (``: ping``) every
    # ``ping`` seconds: a stalled model behind a proxy that keeps the line alive.
    stall: float = 0.0
    ping: float = 0.0


@dataclass
class Status:
    """An HTTP error reply with OpenAI's error body."""

    status: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)
    type: str = "server_error"
    code: str | None = None


@dataclass
class Body:
    """A 200 reply that is no event stream: a JSON ``chat.completion`` from a server
    that ignored ``stream``, a proxy's login page."""

    body: str
    content_type: str = "application/json"


Reply = Stream | Status | Body


@dataclass
class Embeddings:
    """How ``POST /v1/embeddings`` answers (``fake.embeddings``; change it any time)."""

    dim: int = 8  # the width answered when the request names no "dimensions"
    honor_dimensions: bool = True  # False: answer ``dim`` even when "dimensions" asks otherwise
    delay: float = 0.0  # seconds before answering (cut short when the server stops)
    status: int | None = None  # answer this HTTP error (OpenAI's error body) instead
    corrupt: str | None = None  # "nan" | "null" | "malformed" | "short"
    reverse: bool = False  # list the items last first (each keeps its "index")
    trickle: float = 0.0  # seconds between the body's bytes (headers at once): no read waits long


def fake_vector(text: str, dim: int) -> list[float]:
    """The fake's embedding of ``text``: ``dim`` numbers in [-1, 1) from its SHA-256."""
    out: list[float] = []
    counter = 0
    while len(out) < dim:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((b - 128) / 128 for b in digest)
        counter += 1
    return out[:dim]


# --- chunk builders ---------------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    choices: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (with ``usage: null`` unless given, as OpenAI
    sends when ``include_usage`` is on)."""
    if choices is None:
        choices = [
            {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}
        ]
    return {
        "id": "chatcmpl-fake123",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": usage,
    }


def usage_chunk(
    prompt: int, completion: int, *, reasoning: int = 0, cached: int = 0
) -> dict[str, Any]:
    """The last chunk when ``include_usage`` is on: no choices, the usage."""
    return chunk(
        choices=[],
        usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
    )


@dataclass
class ToolCallScript:
    """A streamed tool call: its first chunk carries id and name, then argument fragments."""

    id: str
    name: str
    fragments: Sequence[str]
    index: int = 0


def tool_call_chunks(call: ToolCallScript) -> Iterator[dict[str, Any]]:
    yield chunk(
        {
            "tool_calls": [
                {
                    "index": call.index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
            ]
        }
    )
    for fragment in call.fragments:
        yield chunk({"tool_calls": [{"index": call.index, "function": {"arguments": fragment}}]})


def reply(
    *,
    reasoning: Iterable[str] = (),
    text: Iterable[str] = (),
    tool_calls: Iterable[ToolCallScript] = (),
    finish_reason: str = "stop",
    usage: dict[str, Any] | None = None,
    delay: float = 0.0,
) -> Stream:
    """A complete stream the way OpenAI-compatible servers send it: a role chunk with
    empty content, reasoning, text and tool-call chunks, the finish chunk, the usage
    chunk (``usage`` from :func:`usage_chunk`; a default one when None)."""
    chunks: list[dict[str, Any] | str] = [
        chunk({"role": "assistant", "content": "", "refusal": None})
    ]
    chunks += [chunk({"reasoning_content": piece}) for piece in reasoning]
    chunks += [chunk({"content": piece}) for piece in text]
    for call in tool_calls:
        chunks += tool_call_chunks(call)
    chunks.append(chunk(finish_reason=finish_reason))
    chunks.append(usage if usage is not None else usage_chunk(10, 5))
    return Stream(chunks=chunks, delay=delay)


# --- the server -------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-stream (an abort, a retry test) is expected here.
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # an idle keep-alive connection is dropped after this
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        fake.record(body, {k.lower(): v for k, v in self.headers.items()})
        if self.path.rstrip("/") == "/v1/embeddings":
            self._send_embeddings(body)
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_error(Status(404, f"no route {self.path}", type="invalid_request_error"))
            return
        scripted = fake.next_reply()
        if isinstance(scripted, Status):
            self._send_error(scripted)
        elif isinstance(scripted, Body):
            payload = scripted.body.encode()
            self.send_response(200)
            self.send_header("Content-Type", scripted.content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        else:
            self._send_stream(scripted)

    def _send_error(self, status: Status) -> None:
        payload = json.dumps(
            {
                "error": {
                    "message": status.message,
                    "type": status.type,
                    "param": None,
                    "code": status.code,
                }
            }
        ).encode()
        self.send_response(status.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in status.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_embeddings(self, body: dict[str, Any]) -> None:
        fake = self.server.fake
        with fake._lock:
            fake.embedding_requests.append(body)
            script = fake.embeddings
        if script.delay and fake.stopping.wait(script.delay):
            self.close_connection = True
            return
        if script.status is not None:
            self._send_error(Status(script.status, f"scripted embeddings error {script.status}"))
            return
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) and t for t in texts):
            # OpenAI refuses an empty list and empty strings.
            self._send_error(
                Status(400, "'input' must be non-empty strings", type="invalid_request_error")
            )
            return
        dim = script.dim
        if script.honor_dimensions and isinstance(body.get("dimensions"), int):
            dim = body["dimensions"]
        vectors: list[list[float | None]] = [list(fake_vector(t, dim)) for t in texts]
        if script.corrupt == "nan":
            vectors[0][0] = float("nan")  # json.dumps writes NaN, which Python's json reads
        elif script.corrupt == "null":
            vectors[0][0] = None
        elif script.corrupt == "short":
            vectors = vectors[:-1]
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": _base64_floats(v) if as_base64 else v,
            }
            for i, v in enumerate(vectors)
        ]
        if script.reverse:
            data.reverse()
        tokens = sum(len(t.split()) for t in texts)
        payload = json.dumps(
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        ).encode()
        if script.corrupt == "malformed":
            payload = payload[: len(payload) // 2]  # cut in the middle: not JSON
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if not script.trickle:
            self.wfile.write(payload)
            return
        for byte in range(len(payload)):
            if fake.stopping.wait(script.trickle):
                return
            try:
                self.wfile.write(payload[byte : byte + 1])
                self.wfile.flush()
            except OSError:  # the client gave up
                return

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stall(self, stream: Stream) -> None:
        """``stream.stall`` seconds of silence, or of ``: ping`` comments."""
        stopping = self.server.fake.stopping
        end = time.monotonic() + stream.stall
        while (left := end - time.monotonic()) > 0:
            if stopping.wait(min(left, stream.ping) if stream.ping else left):
                return
            if stream.ping and end - time.monotonic() > 0:
                self._write_chunk(b": ping\n\n")

    def _send_stream(self, stream: Stream) -> None:
        fake = self.server.fake
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for item in stream.chunks:
                if stream.delay:
                    time.sleep(stream.delay)
                data = item if isinstance(item, str) else json.dumps(item)
                self._write_chunk(f"data: {data}\n\n".encode())
            self._stall(stream)
            if stream.drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if stream.done:
                self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True
            fake.disconnected.set()


def _base64_floats(vector: list[float | None]) -> str:
    values = [float("nan") if v is None else v for v in vector]
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


class FakeOpenAI:
    """The server; ``with FakeOpenAI() as fake:`` runs it in a thread."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="fake-openai", daemon=True
        )
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnected = threading.Event()
        self.on_request: Callable[[], object] | None = None  # called as each request arrives
        self.embeddings = Embeddings()
        self.embedding_requests: list[dict[str, Any]] = []
        self.stopping = threading.Event()  # set by stop(): cuts delayed answers short

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def push(self, *replies: Reply) -> None:
        """Script the replies to the next requests, in order."""
        with self._lock:
            self._replies.extend(replies)

    def next_reply(self) -> Reply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return Status(599, "fake_openai: no scripted reply left")

    def record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
        if self.on_request is not None:
            self.on_request()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
