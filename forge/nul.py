"""Requests that hold a NUL character are refused before anything reads them.

PostgreSQL's text cannot hold NUL (``\\x00``): a NUL that reaches a query is a
``DataError``, a 500. Rather than guard every filter, search, lookup and header
one by one, a request is refused at the door when any of these holds a NUL (as
itself or percent-encoded as ``%00``):

* its path (the admin's object ids, the API's session ids);
* a query parameter's name or value (the admin's filters and search, cursors);
* a header or a cookie (a token in ``Authorization``, the session cookie);
* outside the API, a form field of its body (the admin's actions name their rows
  in the POST body). The API's JSON and form bodies are left to the API, which
  validates what it parses.

HTTP (``RefuseNulMiddleware``, first in ``MIDDLEWARE``): 400, with the API's JSON
error body (``{"error": {"code": "invalid", "message"}}``) under the API's paths
and a plain-text body elsewhere. Sockets (``RefuseNulSockets``, around the socket
routes in ``forge.asgi``): accepted and closed at once with 4400, like any other bad
socket request, since a browser cannot read the reason of a refused handshake. Both
answer on SQLite too, where a NUL is harmless but equally meaningless.

The same middleware answers a request with more query parameters (or, outside the API,
form fields) than ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` with the same 400: Django raises
``TooManyFieldsSent`` from their first read, which is here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from forge.api.errors import error_body, too_many_fields

NUL = "\x00"
CLOSE_BAD_REQUEST = 4400
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _any_nul(texts: Iterable[str]) -> bool:
    return any(NUL in text for text in texts)


def is_api(path: str) -> bool:
    """The API's paths (JSON errors): ``/api/…`` and the AI SDK's chat routes."""
    return path.startswith(("/api/", f"/{settings.FORGE_AI_SDK_PREFIX}"))


def where_nul(request: HttpRequest) -> str | None:
    """Which part of the request holds a NUL, or ``None``."""
    if NUL in request.path_info or NUL in request.path:
        return "path"
    if any(_any_nul([name, *values]) for name, values in request.GET.lists()):
        return "query string"
    headers = (str(v) for k, v in request.META.items() if k.startswith("HTTP_"))
    if _any_nul(headers) or NUL in request.META.get("CONTENT_TYPE", ""):
        return "headers"
    if _any_nul([*request.COOKIES, *request.COOKIES.values()]):
        return "cookies"
    if (
        request.method == "POST"
        and not is_api(request.path)
        and request.content_type in FORM_TYPES
        and any(_any_nul([name, *values]) for name, values in request.POST.lists())
    ):
        return "form"
    return None


class RefuseNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            where = where_nul(request)
        except (TooManyFieldsSent, TooManyFilesSent):
            # The first read of the query string (or a page's form) refused it: Django
            # would answer with an HTML page, under DEBUG a 500 (it reads them again).
            return refused(request, too_many_fields())
        if where is None:
            return self.get_response(request)
        return refused(request, f"the request's {where} holds a NUL character")


def refused(request: HttpRequest, message: str) -> HttpResponse:
    """A 400: the API's JSON error body under its paths, plain text elsewhere."""
    if is_api(request.path):
        return JsonResponse(error_body("invalid", message), status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


def socket_holds_nul(scope: dict[str, Any]) -> bool:
    raw_query = bytes(scope.get("query_string", b""))
    return (
        NUL in str(scope.get("path", ""))
        or b"\x00" in unquote_to_bytes(raw_query.replace(b"+", b" "))
        or any(b"\x00" in bytes(name) + bytes(value) for name, value in scope.get("headers", []))
    )


class RefuseNulSockets:
    """ASGI middleware for the socket routes: a handshake whose path, query string or
    headers hold a NUL is accepted and closed with 4400 before any route sees it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket" or not socket_holds_nul(scope):
            return await self.inner(scope, receive, send)
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": CLOSE_BAD_REQUEST})
        return None
