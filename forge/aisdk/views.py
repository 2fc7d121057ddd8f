"""The Vercel AI SDK's chat routes (``useChat``'s default transport) over Forge sessions.

* ``POST /api/chat`` ``{id, messages, trigger, messageId?}``: ``id`` names the chat
  in the caller's tenant: a Forge session id, or a chat id the client chose, which
  becomes the alias of a new session (server-minted id) on first use. Chat ids are
  per tenant: another tenant's ids are never seen. Only the last message is read,
  and it must be the user's: its text parts (joined by blank lines) and ``data:``
  URL file parts become the prompt, through the runtime's one entry. The answer is
  the UI message stream of the reply (:mod:`forge.aisdk.chunks`).
  ``trigger: "regenerate-message"`` answers the chat's last reply's prompt again
  (``messages`` is not read; ``messageId``, optional, must name that reply or its
  prompt): a *new* assistant message with the same parent, streamed like any
  reply; the old one stays in the log, superseded (``forge.runtime.regenerate``).
  No reply to regenerate, another message named, a reply running: 409.
* ``GET /api/chat/{id}/stream``: 204 when no reply runs; else the running reply
  from its ``start`` (its stored id) and then live, from any server process.
* ``POST /api/chat/{id}/stop``: abort the running reply (204; 409 when none runs).
* ``GET /api/chat/{id}/messages``: the chat as ``UIMessage``s (paged), to restore it;
  superseded replies are left out, as the client left them out when it regenerated.

Every error before the stream starts is JSON (``forge.api.errors``). A client
that goes away ends only its stream, never the reply. Auth, CSRF (for the
cookie) and rate limits are the API's (DRF).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any, cast
from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import tenancy
from accounts.exceptions import ForgeError
from accounts.models import Tenant
from forge import runtime
from forge.access import chat_of, tenant_of
from forge.api.parsers import PromptJSONParser
from forge.api.schema import errors
from forge.context.superseded import is_reply
from forge.db.routing import session_read
from forge.errors import EditUnsupported
from forge.params import parse_limit
from forge.realtime import hub
from forge.realtime.auth import recheck_for
from forge.realtime.responses import SubscribedStream, open_stream
from forge.realtime.stream import Heartbeat, Recheck, SessionStream, live_frames
from forge.runtime.approvals.services import answer_all_sync
from forge.runtime.prompting import clean_files, clean_text
from forge.telemetry import metrics
from forge.throttling import PromptRateThrottle
from forge.usage.budgets import check_budget
from sessions import selectors, services
from sessions.exceptions import NotFound
from sessions.frames import is_delta
from sessions.models import Session

from . import approvals, bodies, chunks, history
from .negotiation import STREAM_ROUTE_RENDERERS, StreamNegotiation

HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}


def _owner(request: Request) -> int:
    owner = request.user.pk
    assert isinstance(owner, int)  # IsAuthenticated let only users in
    return owner


def _join(session_id: str, owner: int) -> hub.Subscription:
    """Open the stream's subscription (taking one of ``owner``'s stream slots) from this
    synchronous view, or raise ``TooManyStreams`` (429) / ``StreamUnavailable`` (503).

    Why here and not in the response: a refusal must be JSON before the stream
    starts, and the prompt must not be written when it cannot be streamed. The
    subscription belongs to the server's event loop, which will run the response's
    stream: under daphne this thread works for that loop (``sync_to_async``) and
    ``async_to_sync`` runs the join there, waiting at most ``FORGE_LAYER_TIMEOUT``
    (this request's thread only). Where no server loop runs (WSGI, the sync test
    client), the join runs on a loop of its own and the stream gets the log only.
    """
    return async_to_sync(open_stream)(session_id, owner=owner, face="aisdk")


def _stream_response(
    request: Request,
    subscription: hub.Subscription,
    session: Session,
    reply: chunks.ReplyChunks,
    after: int,
) -> StreamingHttpResponse:
    access = recheck_for(request._request, session.pk)
    response = SubscribedStream(
        subscription,
        lambda subscriber: reply_stream(
            session, reply.message_id, after, subscriber, reply, access=access
        ),
        content_type="text/event-stream",
    )
    for name, value in HEADERS.items():
        response[name] = value
    return response


async def reply_stream(
    session: Session,
    message_id: str,
    after: int,
    subscriber: hub.Subscriber,
    reply: chunks.ReplyChunks | None = None,
    *,
    access: Recheck | None = None,
) -> AsyncGenerator[bytes, None]:
    """The UI message stream of reply ``message_id``: the log after ``after`` (which must
    start at or before the reply's first event, or at the end of what ``reply`` has
    seen), snapshots of its streaming parts, then live frames (``subscriber``,
    subscribed before the backlog is read: no gap), until the reply is complete or
    its turn waits for an approval; then ``[DONE]``. ``access``: the caller's recheck
    (``forge.realtime.stream.live_frames``); a caller who may no longer watch gets an
    ``error`` chunk, then ``[DONE]``."""
    tenancy.activate([session.tenant_id])
    reply = reply or chunks.ReplyChunks(message_id)
    stream = SessionStream(session=session, after=after, snapshots=runtime.snapshots)
    for chunk in reply.begin():
        yield chunks.encode(chunk)
    frames = live_frames(stream, subscriber, heartbeat=settings.FORGE_SSE_HEARTBEAT, recheck=access)
    async with (
        contextlib.aclosing(frames),
        contextlib.aclosing(_reply_chunks(session, reply, frames)) as replies,
    ):
        try:
            async for encoded in replies:
                yield encoded
        except ForgeError as exc:  # the recheck: no longer signed in, a member, or there
            yield chunks.encode(chunks.error(f"{exc.code}: {exc}"))
    yield chunks.DONE


async def _reply_chunks(
    session: Session, reply: chunks.ReplyChunks, frames: AsyncGenerator[Any, None]
) -> AsyncGenerator[bytes, None]:
    """The reply's chunks from the stream's frames, until it is complete or suspended."""
    async for frame in frames:
        if isinstance(frame, Heartbeat):
            yield b": keep-alive\n\n"
            if reply.awaiting:  # the idle status of a suspended turn may have been lost
                for chunk in await _ended(session, reply):
                    yield chunks.encode(chunk)
                if reply.done:
                    break
            continue
        metrics.frames_sent("aisdk", frames=1, deltas=is_delta(frame))
        for chunk in reply.accept(frame):
            yield chunks.encode(chunk)
        if frame.get("kind") == "status" and frame.get("status") == "idle":
            for chunk in await _ended(session, reply):
                yield chunks.encode(chunk)
        if reply.done:  # checked after each frame: the backlog may hold the whole reply
            break


async def _ended(session: Session, reply: chunks.ReplyChunks) -> list[chunks.Chunk]:
    """After an ``idle`` status: the reply's completion, when the log has it (its event
    was sent already, or comes later through the stream, unless it is complete); or,
    when its turn is suspended on an approval (a call awaits one and no runner holds
    the session), the end of this stream: the message stays open."""
    if reply.done:
        return []
    from channels.db import database_sync_to_async

    message = await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=reply.message_id
    )
    if message["info"].get("completed_at"):
        return reply.message(message["info"])
    waiting = [part for part in message["parts"] if chunks.is_awaiting(part)]
    if not waiting or await database_sync_to_async(runtime.is_busy)(session_id=session.pk):
        return []
    out = [chunk for part in waiting for chunk in reply.part(part)]
    return [*out, *reply.suspend()]


# --- the request ----------------------------------------------------------------------


def _chat_session(user: Any, tenant: Tenant, chat_id: str) -> Session:
    """The caller's chat ``chat_id`` (:func:`forge.access.chat_of`: the tenant's session
    with that id or that chat alias), created when the tenant has none: a session with
    a server-minted id and ``chat_id`` as its alias. Chat ids are per tenant, so an id
    another tenant chose first is no obstacle, and nothing tells that it exists."""
    try:
        return chat_of(user, chat_id, tenant=tenant)
    except NotFound:
        pass
    try:
        with transaction.atomic():
            return services.create_session(user=user, tenant=tenant, chat_alias=chat_id)
    except IntegrityError:
        return chat_of(user, chat_id, tenant=tenant)  # a concurrent create of the same chat


def _chat_stream(
    user: Any, tenant: Tenant, chat_id: str, owner: int
) -> tuple[Session, hub.Subscription]:
    """The chat's session, created on first use, and its stream's open subscription,
    opened first: a stream that cannot open (429, 503) leaves no chat behind.

    A new chat's session gets its id, minted by the store, only when it is created, so
    its stream is opened first on the chat id (enough to refuse before writing) and
    again on the session's id once it exists (the first message of a chat only)."""
    try:
        known: str = chat_of(user, chat_id, tenant=tenant).pk
    except NotFound:
        known = chat_id
    subscription = _join(known, owner)
    try:
        session = _chat_session(user, tenant, chat_id)
        if session.pk != subscription.session_id:
            subscription.close_soon()
            subscription = _join(session.pk, owner)
    except BaseException:
        subscription.close_soon()
        raise
    return session, subscription


def _refuse_edit(user: Any, tenant: Tenant, chat_id: str, message_id: str | None) -> None:
    """Refuse a submit that replaces an earlier prompt of the chat (``EditUnsupported``).

    The log is append-only and later turns answered the old text, so such an edit was
    logged as a new prompt at the end: the client showed the edited message and its
    answer alone, and the model saw the old turn too (QA). Naming the chat's last
    prompt (``sendMessage()`` again, or an edit of it) is a new prompt, as before; so
    is an id the chat does not have (a live client's own, which cannot be placed)."""
    if message_id is None:
        return
    try:
        session = chat_of(user, chat_id, tenant=tenant)
    except NotFound:
        return
    info = selectors.message_info(tenant=tenant, session=session, message_id=message_id)
    if info is None or info.get("role") != "user":
        return
    if message_id != selectors.last_prompt_id(tenant=tenant, session=session):
        raise EditUnsupported(
            f"message {message_id!r} was sent already and later turns answered it; a chat's "
            "messages cannot be edited (its log is append-only): send the new text as a "
            "new message"
        )


class ChatView(APIView):
    """``POST /api/chat``: a user message in, the reply out as a UI message stream."""

    parser_classes = [PromptJSONParser]
    content_negotiation_class = StreamNegotiation
    renderer_classes = STREAM_ROUTE_RENDERERS

    def get_throttles(self) -> list[Any]:
        return [*super().get_throttles(), PromptRateThrottle()]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={(200, "text/event-stream"): OpenApiTypes.STR, **errors(404, 409, 413, 503)},
    )
    def post(self, request: Request) -> StreamingHttpResponse:
        """Everything that can refuse the request does so before anything is written:
        the body, the prompt, then the stream (429 at the user's stream limit, 503
        while the channel layer is away), whose subscription is open before the chat
        is created or the prompt logged."""
        tenant = tenant_of(request.user)
        owner = _owner(request)
        body, chat_id, trigger = bodies.chat_request(request.data)
        if trigger == "submit-message" and approvals.is_answer(body):
            return _answer(request, tenant, body, chat_id)
        if trigger == "regenerate-message":
            message_id = bodies.regenerated_id(body)
            session = chat_of(request.user, chat_id, tenant=tenant)  # never created here
            if (
                message_id is not None
                and bodies.names_last_user_message(body, message_id)
                and selectors.message_info(tenant=tenant, session=session, message_id=message_id)
                is None
            ):
                message_id = None  # a live client's own id for its last prompt: the last reply
            subscription = _join(session.pk, owner)

            def start() -> runtime.PromptResult:
                return runtime.regenerate(
                    session=session,
                    message_id=message_id,
                    speaker=cast(AbstractBaseUser, request.user),
                )
        else:
            text, files = bodies.prompt_of(body)
            text = clean_text(text)  # before anything is written (a new chat included)
            clean_files(files)
            _refuse_edit(request.user, tenant, chat_id, bodies.edited_id(body))
            # The prompt checks the budget too, but a new chat is created before it.
            check_budget(tenant=tenant, user_id=cast(int, request.user.pk))
            session, subscription = _chat_stream(request.user, tenant, chat_id, owner)

            def start() -> runtime.PromptResult:
                return runtime.prompt(
                    session=session,
                    text=text,
                    files=files,
                    speaker=cast(AbstractBaseUser, request.user),
                )

        try:
            head = selectors.head_seq(tenant=tenant, session_id=session.pk)
            result = start()
        except BaseException:
            subscription.close_soon()
            raise
        reply = chunks.ReplyChunks(result.assistant_message_id, approvals=approvals.wanted(request))
        return _stream_response(request, subscription, session, reply, head)


def _answer(
    request: Request, tenant: Tenant, body: dict[str, Any], chat_id: str
) -> StreamingHttpResponse:
    """An ``addToolApprovalResponse`` request (:mod:`forge.aisdk.approvals`): the
    answers go to the runtime together (all logged or none; the turn goes on once,
    after the last), and the rest of the same message streams back from the
    log's head before the first answer (nothing the client has is sent again). A call
    that was past its expiry is logged denied as expired and shows so in that stream:
    the turn goes on, so the request did not fail (a 409 said it had, QA)."""
    message_id, answers = approvals.answers_of(body)
    session = chat_of(request.user, chat_id, tenant=tenant)  # never created here
    subscription = _join(session.pk, _owner(request))
    try:
        head = selectors.head_seq(tenant=tenant, session_id=session.pk)
        stored = selectors.get_message(tenant=tenant, session_id=session.pk, message_id=message_id)
        reply = chunks.ReplyChunks(message_id, approvals=True)
        reply.seen(stored["parts"])
        answer_all_sync(
            session=session,
            user=request.user,
            answers=[
                (answer.call_id, answer.approve, answer.reason)
                for answer in approvals.to_send(answers, stored["parts"])
            ],
            message_id=message_id,
        )
    except BaseException:
        subscription.close_soon()
        raise
    return _stream_response(request, subscription, session, reply, head)


class ChatStreamView(APIView):
    """``GET /api/chat/{id}/stream``: resume the running reply (204 when none runs)."""

    content_negotiation_class = StreamNegotiation
    renderer_classes = STREAM_ROUTE_RENDERERS

    @extend_schema(
        responses={(200, "text/event-stream"): OpenApiTypes.STR, 204: None, **errors(400, 503)}
    )
    def get(self, request: Request, chat_id: str) -> StreamingHttpResponse | Response:
        """204 for a chat with nothing running, a chat not created yet included:
        ``useChat({resume: true})`` asks on mount, and a new chat's id is the client's
        own until its first message (a 404 put every new chat in an error state)."""
        tenant = tenant_of(request.user)
        try:
            session = chat_of(request.user, bodies.checked_chat_id(chat_id), tenant=tenant)
        except NotFound:
            return Response(status=status.HTTP_204_NO_CONTENT)
        if not runtime.is_busy(session_id=session.pk, tenant_id=session.tenant_id):
            return Response(status=status.HTTP_204_NO_CONTENT)
        running = selectors.open_assistant_messages(tenant=tenant, session=session)
        if not running:  # busy compacting: no reply to follow
            return Response(status=status.HTTP_204_NO_CONTENT)
        message_id = running[-1]["info"]["id"]
        first = selectors.message_start_seq(tenant=tenant, session=session, message_id=message_id)
        subscription = _join(session.pk, _owner(request))  # 429 / 503 before the stream
        reply = chunks.ReplyChunks(message_id, approvals=approvals.wanted(request))
        return _stream_response(request, subscription, session, reply, max((first or 1) - 1, 0))


class ChatMessagesView(APIView):
    """``GET /api/chat/{id}/messages?limit=&before=``: the chat as ``UIMessage``s, to
    restore it on load. Paged like the session's history: the newest page first,
    messages oldest first in a page, ``next`` the URL of the older page."""

    @extend_schema(
        parameters=[
            OpenApiParameter("limit", int, description="messages per page, at most 200"),
            OpenApiParameter("before", str, description="the next page's cursor"),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, chat_id: str) -> Response:
        tenant = tenant_of(request.user)
        session = chat_of(request.user, bodies.checked_chat_id(chat_id), tenant=tenant)
        limit = parse_limit(
            request.query_params.get("limit"),
            default=selectors.PAGE_DEFAULT,
            maximum=selectors.PAGE_MAX,
        )
        page = session_read(  # on the replica once it has the whole log (forge.db.routing)
            lambda: selectors.message_page(
                tenant=tenant,
                session_id=session.pk,
                limit=limit,
                before=request.query_params.get("before"),
            ),
            tenant=tenant,
            session_id=session.pk,
        )
        next_url = None
        if page.next_before:
            query = urlencode({"limit": limit, "before": page.next_before})
            next_url = request.build_absolute_uri(request.path) + "?" + query
        wanted = approvals.wanted(request)
        response = Response(
            {
                "results": [
                    history.ui_message(item, approvals=wanted)
                    for item in _current(session, page.items)
                ],
                "next": next_url,
                "previous": None,
            }
        )
        if next_url:
            response["Link"] = f'<{next_url}>; rel="next"'
        return response


def _current(session: Session, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` without the replies a regenerated one superseded (its newer reply may
    be on a newer page, so the store is asked, not the page)."""
    parents = [str(i["info"]["parent_id"]) for i in items if is_reply(i["info"])]
    if not parents:
        return items
    newest = selectors.newest_replies(tenant=session.tenant, session=session, parent_ids=parents)
    return [
        item
        for item in items
        if not is_reply(item["info"])
        or newest.get(str(item["info"]["parent_id"])) == item["info"]["id"]
    ]


class ChatStopView(APIView):
    """``POST /api/chat/{id}/stop``: abort the running reply; 204 once it is finalized."""

    @extend_schema(request=None, responses={204: None, **errors(400, 409, 503)})
    def post(self, request: Request, chat_id: str) -> Response:
        session = chat_of(request.user, bodies.checked_chat_id(chat_id))
        runtime.abort(session=session)
        return Response(status=status.HTTP_204_NO_CONTENT)
