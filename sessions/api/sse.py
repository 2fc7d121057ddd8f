"""``GET /api/sessions/{id}/stream/``: the session as Server-Sent Events (CONTRACT §3).

Durable frames carry ``id: <seq>``, so a browser's ``EventSource`` resumes with
``Last-Event-ID`` and misses nothing; ``?after=`` does the same for other
clients. Snapshots, deltas and status frames have no id. An idle stream gets a
comment every ``FORGE_SSE_HEARTBEAT`` seconds. When the client goes, Django
cancels the response and the subscription is dropped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from rest_framework.authtoken.models import Token

from accounts.selectors import NoTenant, tenant_for_user
from sessions import hub, selectors
from sessions.exceptions import NotFound
from sessions.models import Session
from sessions.streaming import Frame, SessionStream

from .errors import error_body


def _user(request: HttpRequest) -> Any:
    """The token's user when an ``Authorization: Token`` header is sent, else the cookie's."""
    header = request.headers.get("Authorization")
    if header is None:
        return request.user
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "token":
        return AnonymousUser()
    token = Token.objects.select_related("user").filter(key=key.strip()).first()
    return token.user if token and token.user.is_active else AnonymousUser()


def _find(request: HttpRequest, session_id: str) -> Session | JsonResponse:
    user = _user(request)
    if not user.is_authenticated:
        response = JsonResponse(
            error_body("not_authenticated", "log in or send a token"), status=401
        )
        response["WWW-Authenticate"] = "Token"
        return response
    try:
        return selectors.get_session(tenant=tenant_for_user(user), session_id=session_id)
    except (NotFound, NoTenant):
        return JsonResponse(error_body("not_found", f"no session {session_id!r}"), status=404)


def encode(frame: Frame) -> bytes:
    data = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
    if frame.get("kind") == "event":
        return f"id: {frame['seq']}\ndata: {data}\n\n".encode()
    return f"data: {data}\n\n".encode()


async def stream_view(request: HttpRequest, session_id: str) -> HttpResponseBase:
    if request.method != "GET":
        return JsonResponse(error_body("method_not_allowed", "use GET"), status=405)
    found = await sync_to_async(_find)(request, session_id)
    if isinstance(found, JsonResponse):
        return found
    raw = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    if not raw.strip().isdigit():
        return JsonResponse(
            error_body("invalid_cursor", f"Last-Event-ID / after must be a seq, got {raw!r}"),
            status=400,
        )
    response = StreamingHttpResponse(
        _frames(found, int(raw.strip())), content_type="text/event-stream; charset=utf-8"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _frames(session: Session, after: int) -> AsyncIterator[bytes]:
    from forge import runtime

    stream = SessionStream(session=session, after=after, snapshots=runtime.snapshots)
    # Subscribe before reading the backlog (the stream drops what it already covered).
    async with hub.subscribe(session.pk) as subscriber:
        yield b": forge session stream\n\n"
        for frame in await stream.backlog():
            yield encode(frame)
        quiet = min(settings.FORGE_STREAM_RESYNC_SECONDS, settings.FORGE_SSE_HEARTBEAT)
        idle_since = asyncio.get_running_loop().time()
        while True:
            try:
                frames = await asyncio.wait_for(subscriber.batch(), timeout=quiet)
            except TimeoutError:
                if stream.needs_resync:  # activity went quiet: was its tail lost?
                    for out in await stream.resync():
                        yield encode(out)
                now = asyncio.get_running_loop().time()
                if now - idle_since >= settings.FORGE_SSE_HEARTBEAT:
                    idle_since = now
                    yield b": heartbeat\n\n"
                continue
            idle_since = asyncio.get_running_loop().time()
            for frame in frames:
                for out in await stream.accept(frame):
                    yield encode(out)
