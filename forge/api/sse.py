"""``GET /api/sessions/{id}/stream/``: the session as Server-Sent Events (CONTRACT §3).

Durable frames carry ``id: <seq>``, so a browser's ``EventSource`` resumes with
``Last-Event-ID`` and misses nothing; ``?after=`` does the same for other
clients (an id past the log's head is 400 ``invalid_cursor``). After that backlog (and
the snapshots of what still streams) comes one ``session.status``, ``busy`` or
``idle``, as on the socket. Snapshots, deltas and status frames have no id. An idle
stream gets a comment every ``FORGE_SSE_HEARTBEAT`` seconds. A stream whose session was
deleted ends with an error frame (``not_found``): the deletion's own frame, or at the
next heartbeat if that was lost. The subscription is open before the view answers: a
channel layer that is away is 503 ``stream_unavailable`` with ``Retry-After``, never a
stream that hangs. When the client goes, Django cancels the response and the
subscription is dropped.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts import tenancy
from accounts.exceptions import ForgeError
from forge import runtime
from forge.access import session_of, user_for_authorization
from forge.params import parse_seq
from forge.realtime.auth import recheck_for
from forge.realtime.hub import Subscriber
from forge.realtime.responses import SubscribedStream, open_stream
from forge.realtime.stream import Heartbeat, Recheck, SessionStream, check_after, live_frames
from forge.telemetry import metrics
from forge.throttling import check_api_rate
from sessions.exceptions import NotFound
from sessions.frames import Frame, error_frame, is_deleted_frame, is_delta
from sessions.models import Session

from .errors import error_body, error_response

ALLOW = "GET, OPTIONS"


def _find(request: HttpRequest, session_id: str, after: str | None) -> tuple[int, Session, int]:
    """The caller's id, their session (DRF's token auth, else the cookie's user) and the
    seq to resume after (at most the log's head)."""
    authorization = request.headers.get("Authorization", "")
    user = user_for_authorization(authorization, fallback=request.user, strict=True)
    session = session_of(user, session_id)
    check_api_rate(user)  # a stream's opening is one request, as on every face
    seq = parse_seq(after, name="Last-Event-ID / after", default=0)
    check_after(session, seq)
    return user.pk, session, seq


@sync_to_async
def _still_there(session: Session) -> bool:
    """Whether the session still exists (one primary-key read, at each heartbeat)."""
    return Session.objects.filter(pk=session.pk, tenant_id=session.tenant_id).exists()


def encode(frame: Frame) -> bytes:
    data = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
    if frame.get("kind") == "event":
        return f"id: {frame['seq']}\ndata: {data}\n\n".encode()
    return f"data: {data}\n\n".encode()


@csrf_exempt  # it only reads; another method is the 405 below (it was CSRF's HTML 403)
async def stream_view(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """Every refusal is JSON before the stream starts: the method, the session, the
    cursor, then the subscription (open, and its stream slot taken) or 429 / 503."""
    if request.method == "OPTIONS":  # what DRF's routes answer: a description of the route
        described = JsonResponse(
            {
                "name": "Session Stream",
                "description": "The session as Server-Sent Events (CONTRACT §3).",
                "renders": ["text/event-stream"],
                "parses": [],
            }
        )
        described["Allow"] = ALLOW
        return described
    if request.method != "GET":
        refused = JsonResponse(error_body("method_not_allowed", "use GET"), status=405)
        refused["Allow"] = ALLOW
        return refused
    try:
        # A header's value is what is between its optional white space (RFC 9110 5.5).
        header = (request.headers.get("Last-Event-ID") or "").strip(" \t")
        raw = header or request.GET.get("after")
        owner, session, after = await sync_to_async(_find)(request, session_id, raw)
        subscription = await open_stream(session.pk, owner=owner, face="sse")
    except ForgeError as exc:
        return error_response(exc)
    response = SubscribedStream(
        subscription,
        lambda subscriber: _frames(session, after, subscriber, recheck_for(request, session.pk)),
        content_type="text/event-stream; charset=utf-8",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _frames(
    session: Session, after: int, subscriber: Subscriber, access: Recheck
) -> AsyncGenerator[bytes, None]:
    # Iterated by the server after the view returned, in a context of its own.
    tenancy.activate([session.tenant_id])
    stream = SessionStream(session=session, after=after, snapshots=runtime.snapshots)
    # Subscribed before the backlog is read (the stream drops what it already covered).
    yield b": forge session stream\n\n"
    # After the backlog, what the session does now (busy or idle), as on the socket.
    frames = live_frames(
        stream, subscriber, heartbeat=settings.FORGE_SSE_HEARTBEAT, status=True, recheck=access
    )
    async with contextlib.aclosing(frames):
        try:
            async for frame in frames:
                if isinstance(frame, Heartbeat):
                    if not await _still_there(session):
                        # Deleted while watched: say so and end (a browser's EventSource
                        # reconnects, and gets the 404 then).
                        yield encode(error_frame("not_found", "the session was deleted"))
                        return
                    yield b": heartbeat\n\n"
                    continue
                metrics.frames_sent("sse", frames=1, deltas=is_delta(frame))
                yield encode(frame)
                if is_deleted_frame(frame):  # published by the deletion: the stream ends
                    return
        except NotFound as exc:  # the recheck: the session is gone
            yield encode(error_frame(exc.code, str(exc)))
        except ForgeError as exc:  # the recheck: no longer signed in, or no longer a member
            yield encode(error_frame("not_authenticated", str(exc)))
