"""Request bodies over their route's limit, refused by the server before they are read.

Every request has a limit (:func:`limit_for`): the import route's is
``FORGE_MAX_IMPORT_BYTES`` (an export file); a prompt's (``POST …/messages/``, the AI SDK's
``POST /api/chat``) is what the largest valid prompt takes (``MAX_FILES`` files of
``MAX_FILE_BYTES`` in base64, and the text); any other request's is Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``, which Django would refuse anyway, but only once the
whole body was in memory (a 600 MB POST to the login page, without signing in, grew
the process by 400 MB before its 400). The import view checks its own limit
(:func:`read_body`), but under daphne that is too late: daphne (twisted's
``http.Request``) receives the whole body, into a temporary file, before the
application sees any of it, and Django's ASGI handler then copies it again. So a
199 MB import was read whole before it was refused.

:func:`install` gives daphne a request class that applies the limit as the body
arrives: a ``Content-Length`` over it is answered at once, when the headers are in;
a chunked body is counted, and answered as soon as it passes the limit. The answer
is 413 with the API's JSON error, ``Connection: close``; what the client still sends
is read and dropped (never stored) for at most :data:`LINGER_SECONDS`, so that a
client busy sending can read the 413 before the connection is closed (closing a
socket with unread data would reset it and could lose the answer); then the
connection is cut. ``forge.asgi`` installs it: every ``daphne forge.asgi:application``
serves with it. Under another server the view's own check still refuses the body,
once the server has read it.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import unquote

from django.conf import settings
from django.urls import reverse

from forge.errors import BodyTooLarge, ForgeError, HeadersTooLarge, MalformedRequest, UriTooLong

logger = logging.getLogger(__name__)

LINGER_SECONDS = 5.0  # how long what a refused client still sends is read and dropped


_PROMPT_ROUTE = re.compile(r"/api/sessions/[^/]+/messages/?")


def prompt_body_limit() -> int:
    """The largest body a valid prompt can take: every file at its limit in base64, and
    the text at its limit with every character escaped (``\\uXXXX``), and room for
    the rest of the JSON or multipart envelope."""
    from forge.runtime.prompting import MAX_FILE_BYTES, MAX_FILES

    files = MAX_FILES * (MAX_FILE_BYTES * 4 // 3 + 4)
    return files + 6 * int(settings.FORGE_MAX_PROMPT_BYTES) + 1024 * 1024


def limit_for(method: bytes | str, path: bytes | str, *, signed: bool = True) -> int | None:
    """The largest body a request may send (``path`` as the request line has it, query
    included): see the module's docstring. None: no limit (only when
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is None, Django's way of saying so).

    ``signed``: the request carries credentials (an ``Authorization`` header or the
    session cookie). Without them the import and prompt routes, which answer such a
    request 401 anyway, get the general limit: an anonymous client could otherwise
    make the server take in 64 MiB per request before it said no."""
    if isinstance(method, bytes):
        method = method.decode("latin-1")
    if isinstance(path, bytes):
        path = path.decode("latin-1")
    if method.upper() == "POST" and signed:
        route = unquote(path.split("?", 1)[0])
        if route == reverse("session-import"):
            return int(settings.FORGE_MAX_IMPORT_BYTES)
        chat = "/" + str(settings.FORGE_AI_SDK_PREFIX).strip("/")
        if _PROMPT_ROUTE.fullmatch(route) or route == chat:
            return prompt_body_limit()
    general = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return None if general is None else int(general)


def _signed(headers: Any) -> bool:
    """Whether request headers (twisted's ``Headers``) carry credentials: an
    ``Authorization`` header, or the session cookie (whether either is valid is the
    view's to say)."""
    if headers.hasHeader(b"authorization"):
        return True
    cookie = settings.SESSION_COOKIE_NAME.encode() + b"="
    return any(cookie in value for value in headers.getRawHeaders(b"cookie") or [])


def too_large(limit: int) -> BodyTooLarge:
    return BodyTooLarge(f"the request body is over the limit of {limit} bytes")


def read_body(request: Any, *, limit: int) -> bytes:
    """The body of ``request`` (a Django ``HttpRequest``), at most ``limit`` bytes, or
    ``BodyTooLarge``: by its ``Content-Length`` before reading anything, else (a
    chunked upload) by reading one byte past the limit at most."""
    announced = request.META.get("CONTENT_LENGTH") or ""
    if announced.isdigit() and int(announced) > limit:
        raise too_large(limit)
    body: bytes = request.read(limit + 1)
    if len(body) > limit:
        raise too_large(limit)
    return body


def _answer(error: ForgeError) -> bytes:
    """The raw answer to a request refused by the server itself: the API's JSON error,
    ``Connection: close``."""
    from http import HTTPStatus

    body = json.dumps({"error": {"code": error.code, "message": str(error)}}).encode()
    head = (
        f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def _reason_phrases() -> None:
    """Twisted's status line says "Unknown Status" for a code its table lacks (429 Too
    Many Requests, every throttled answer): give it the standard library's phrases."""
    from http import HTTPStatus

    from twisted.web import http

    for status in HTTPStatus:
        http.RESPONSES.setdefault(status.value, status.phrase.encode("ascii"))


def install() -> None:
    """Make daphne's HTTP requests apply :func:`limit_for` while their body arrives (see
    the module's docstring). Idempotent; does nothing without daphne."""
    try:
        from daphne import http_protocol
        from twisted.internet import reactor as twisted_reactor
    except ImportError:  # not served by daphne
        return
    reactor: Any = twisted_reactor  # the running reactor (its stubs type the module)
    _reason_phrases()
    _answer_bad_heads()
    base = http_protocol.WebRequest
    if getattr(base, "forge_limits", False):
        return

    class LimitedRequest(base):  # type: ignore[misc, valid-type]
        """daphne's request, refusing a body over its route's limit as it arrives."""

        forge_limits = True
        _limit: int | None = None
        _received = 0
        _refused = False
        _linger: Any = None

        def gotLength(self, length: int | None) -> None:
            channel = self.channel
            self._limit = limit_for(
                getattr(channel, "_command", b""),
                getattr(channel, "_path", b""),
                signed=_signed(self.requestHeaders),
            )
            if self._limit is not None and length is not None and length > self._limit:
                # No "100 Continue" for a body that is refused: the 413 is the answer.
                self.requestHeaders.removeHeader(b"Expect")
                self._refuse()
                length = 0  # no temporary file for a body that is not kept
            super().gotLength(length)

        def handleContentChunk(self, data: bytes) -> None:
            if self._refused:
                return
            if self._limit is not None:
                self._received += len(data)
                if self._received > self._limit:
                    self._refuse()
                    return
            super().handleContentChunk(data)

        def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
            # Twisted would parse a POST's form or multipart body into ``args``, which
            # daphne never reads (the application gets the raw body and Django parses
            # it): a multipart upload parsed twice, and the Content-Type of every POST
            # parsed by the ``email`` package (~4 % of a JSON prompt's server CPU).
            self._parsePOSTFormSubmission = False
            if not self._refused:  # a refused request never reaches the application
                super().requestReceived(command, path, version)

        def connectionLost(self, reason: Any) -> None:
            if self._linger is not None and self._linger.active():
                self._linger.cancel()
            super().connectionLost(reason)

        def _refuse(self) -> None:
            assert self._limit is not None
            self._refused = True
            channel = self.channel
            transport = channel.transport
            logger.info(
                "refused a request body over %d bytes from %s", self._limit, transport.getPeer()
            )
            transport.write(_answer(too_large(self._limit)))
            channel.dataReceived = _drop  # read and dropped from now on, never stored
            half_close = getattr(transport, "loseWriteConnection", None)
            if half_close is None:
                transport.loseConnection()
                return
            half_close()  # the 413, then FIN; the client may still send for a while
            self._linger = reactor.callLater(LINGER_SECONDS, transport.abortConnection)

    http_protocol.WebRequest = LimitedRequest


def _answer_bad_heads() -> None:
    """Give a request whose head twisted refuses an answer that says why.

    Twisted's channel reads a line (the request line, or a header) of at most
    ``MAX_LENGTH`` bytes and a head of at most ``totalHeadersSize`` (16 KiB each). Past
    the first it dropped the connection without a word (a link with a 20 KB query
    string: "connection reset"); past the second, and for anything it cannot parse, it
    wrote a bare ``400 Bad Request`` with no body. Now a request line too long is 414,
    headers too large are 431, anything else is 400, each with the API's JSON error."""
    from twisted.web import http

    channel: Any = http.HTTPChannel
    if getattr(channel, "forge_heads", False):
        return

    def refuse(self: Any, error: ForgeError) -> None:
        logger.info("refused a request from %s: %s", self.transport.getPeer(), error)
        self.transport.write(_answer(error))
        self.loseConnection()

    def line_length_exceeded(self: Any, line: bytes) -> None:
        if self._HTTPChannel__first_line:  # still reading the request line
            refuse(self, UriTooLong(f"the request line is longer than {self.MAX_LENGTH} bytes"))
        else:
            refuse(self, HeadersTooLarge(f"a header line is longer than {self.MAX_LENGTH} bytes"))

    def bad_request(self: Any) -> None:
        if self._receivedHeaderSize > self.totalHeadersSize:
            limit = self.totalHeadersSize
            refuse(
                self,
                HeadersTooLarge(f"the request line and headers are over {limit} bytes in all"),
            )
        else:
            refuse(self, MalformedRequest("the request is not valid HTTP"))

    channel.lineLengthExceeded = line_length_exceeded
    channel._respondToBadRequestAndDisconnect = bad_request
    channel.forge_heads = True


def _drop(data: bytes) -> None:
    """What a refused client still sends: read from the socket, and dropped."""
