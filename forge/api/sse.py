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

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase

from accounts import tenancy
from accounts.exceptions import ForgeError
from forge import runtime
from forge.access import session_of, user_for_authorization
from forge.params import parse_seq
from forge.realtime import hub, limits
from forge.realtime.stream import SessionStream
from sessions.frames import Frame
from sessions.models import Session

from .errors import error_body, error_response


def _find(request: HttpRequest, session_id: str) -> tuple[int, Session]:
    """The caller's id and their session (DRF's token auth, else the cookie's user)."""
    user = user_for_authorization(request.headers.get("Authorization", ""), fallback=request.user)
    return user.pk, session_of(user, session_id)


def encode(frame: Frame) -> bytes:
    data = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
    if frame.get("kind") == "event":
        return f"id: {frame['seq']}\ndata: {data}\n\n".encode()
    return f"data: {data}\n\n".encode()


async def stream_view(request: HttpRequest, session_id: str) -> HttpResponseBase:
    if request.method != "GET":
        return JsonResponse(error_body("method_not_allowed", "use GET"), status=405)
    try:
        owner, session = await sync_to_async(_find)(request, session_id)
        raw = request.headers.get("Last-Event-ID") or request.GET.get("after")
        after = parse_seq(raw, name="Last-Event-ID / after", default=0)
        limits.take(owner)
    except ForgeError as exc:
        return error_response(exc)
    response = limits.CountedStreamResponse(
        _frames(session, after),
        content_type="text/event-stream; charset=utf-8",
        user_id=owner,
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _frames(session: Session, after: int) -> AsyncIterator[bytes]:
    # Iterated by the server after the view returned, in a context of its own.
    tenancy.activate([session.tenant_id])
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
