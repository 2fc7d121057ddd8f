"""The session socket: ``/ws/sessions/{id}/?after=SEQ`` (CONTRACT §4).

On connect the log after ``after``, then snapshots of what is still streaming, then
one ``session.status`` (``busy`` or ``idle``: what the session is doing now), then live
frames, with no gap and no duplicate (``forge.realtime.stream``).
Client frames: ``prompt``, ``abort``, ``ping``, and ``snapshot`` (ask again for
the text of streaming parts). Turns run as their own tasks; this consumer only
starts and stops them through ``forge.runtime``, which validates the prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import sys
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from accounts import tenancy
from accounts.exceptions import ForgeError
from forge import runtime
from forge.access import session_of, user_for_authorization
from forge.errors import NotAuthenticated, StreamUnavailable
from forge.params import parse_seq
from forge.telemetry import metrics
from forge.throttling import PromptRateThrottle, Throttled, check_api_rate
from sessions.exceptions import NotFound
from sessions.frames import (
    Frame,
    ack_frame,
    error_frame,
    is_deleted_frame,
    is_delta,
    pong_frame,
)
from sessions.models import Session
from sessions.storable import holds_surrogate, surrogate_path

from . import hub
from .auth import authorization, current_user, recheck
from .stream import Heartbeat, SessionStream, check_after, live_frames

try:  # what daphne's protocol raises on a send after the client closed
    from autobahn.exception import Disconnected
except ImportError:  # pragma: no cover (another ASGI server: no such case)

    class Disconnected(Exception):  # type: ignore[no-redef]
        pass


logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400
CLOSE_TOO_MANY = 4429
CLOSE_SERVER_ERROR = 1011
# The channel layer is away: try again later. HTTP's 503 in the 4xxx range, like the
# codes above (RFC 6455's own 1013 is one daphne cannot send: autobahn lets a server
# send only 1000 and 3000-4999).
CLOSE_UNAVAILABLE = 4503
MAX_FRAME_BYTES = 1024 * 1024
# A frame's ``client_id`` is the client's own label, echoed in its ack and errors: text,
# and short (any JSON, of any size, was echoed back).
CLIENT_ID_MAX = 256
# A refused answer's ``call_id`` is echoed when it could be one (``check_answer``'s
# bound): a megabyte of it was sent back whole (QA).
CALL_ID_MAX = 200


class _NotJsonNumber(ValueError):
    """``NaN``, ``Infinity`` or a number no float holds (``1e999``): Python's decoder
    reads them, JSON has none, and HTTP refuses them (DRF's parser); the socket took
    them (QA)."""


def _no_constant(name: str) -> Any:
    raise _NotJsonNumber(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJsonNumber(text[:40])
    return value


def _echoed_call_id(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= CALL_ID_MAX and not holds_surrogate(value):
        return value
    return None


def _opened(user: Any, session_id: str) -> Session:
    """The caller's session (``NotAuthenticated``, ``NotFound``), the socket's opening
    counted as one API request of its user, as on every face (``Throttled``): one trip
    to the sync thread."""
    session = session_of(user, session_id)
    check_api_rate(user)
    return session


class SessionConsumer(AsyncWebsocketConsumer):
    # No channel-layer channel of its own: frames arrive through forge.realtime.hub, one
    # subscription per session per process (Channels skips the layer for an alias
    # that names none).
    channel_layer_alias = None

    session: Session
    stream: SessionStream | None = None
    subscription: hub.Subscription | None = None  # holds one of the user's stream slots
    forwarding: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        """Accept, then check who asks, for which session, after which seq; then open the
        subscription (which takes one of the user's stream slots) and send the backlog.
        A refusal is an error frame (but for 4401 / 4404) and a close code: 4400 a bad
        ``after`` (past the log's head too), 4429 too many streams or over the user's
        API rate (``FORGE_API_RATE``), 4503 a channel
        layer that is away (try again later). Nothing is held after a refusal."""
        await self.accept()
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        try:
            self.session = await database_sync_to_async(_opened)(self.scope.get("user"), session_id)
        except NotAuthenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        except Throttled as exc:
            await self._error(exc.code, str(exc), retry_after=exc.retry_after)
            await self.close(code=CLOSE_TOO_MANY)
            return
        except ForgeError:  # no tenant, or no such session in it
            await self.close(code=CLOSE_NOT_FOUND)
            return
        tenancy.activate([self.session.tenant_id])  # this socket's tasks see its tenant only
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        try:
            after = parse_seq(query.get("after", [""])[-1], name="after", default=0)
            if after:
                await database_sync_to_async(check_after)(self.session, after)
        except ForgeError as exc:
            await self._error(exc.code, str(exc))
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        try:
            # Subscribe first: frames published from now on wait in our queue until the
            # backlog has been sent, and the stream drops what the backlog already covered.
            self.subscription = await hub.join(self.session.pk, owner=self.scope["user"].pk)
        except ForgeError as exc:
            await self._error(exc.code, str(exc))
            code = CLOSE_UNAVAILABLE if isinstance(exc, StreamUnavailable) else CLOSE_TOO_MANY
            await self.close(code=code)
            return
        self.stream = SessionStream(session=self.session, after=after, snapshots=runtime.snapshots)
        try:
            for frame in await self.stream.backlog():
                await self._send(frame)
            # What the session does now: a client learnt it only at the next change.
            await self._send(await self.stream.status())
        except Disconnected:  # the client left while its backlog was sent: no error
            await self._unsubscribe()
            return
        except BaseException:
            # Channels does not call disconnect() when connect() fails: leave here.
            await self._unsubscribe()
            raise
        self.forwarding = asyncio.get_running_loop().create_task(
            self._forward(self.subscription.subscriber)
        )

    async def _forward(self, subscriber: hub.Subscriber) -> None:
        """Live frames, through the stream's dedupe and repair, to the client.

        If this fails, the socket is closed (1011): a client that reconnects
        repairs what it missed from the log, while a socket left open and deaf
        would not know to.
        """
        try:
            await self._forward_frames(subscriber)
        except asyncio.CancelledError:
            raise
        except NotFound as exc:  # the session was deleted while the stream read its log
            await self._unsubscribe()
            with contextlib.suppress(Exception):  # the client may be gone as well
                await self._error(exc.code, str(exc))
            await self.close(code=CLOSE_NOT_FOUND)
        except ForgeError as exc:  # the recheck: no longer signed in, or no longer a member
            await self._unsubscribe()
            with contextlib.suppress(Exception):
                await self._error("not_authenticated", str(exc))
            await self.close(code=CLOSE_UNAUTHENTICATED)
        except Disconnected:  # the client went first (a frame over the limit: 1009)
            await self._unsubscribe()
        except Exception:
            logger.exception("the socket of session %s stopped forwarding", self.session.pk)
            await self._unsubscribe()
            await self.close(code=CLOSE_SERVER_ERROR)

    async def _forward_frames(self, subscriber: hub.Subscriber) -> None:
        assert self.stream is not None
        # The backlog went out in connect(); no heartbeat: the socket has its own pings.
        frames = live_frames(
            self.stream,
            subscriber,
            replay=False,
            recheck=lambda: recheck(self.scope, self.session.pk),
        )
        async with contextlib.aclosing(frames):
            async for frame in frames:
                assert not isinstance(frame, Heartbeat)
                if is_deleted_frame(frame):  # sent by the handler below, then 4404
                    raise NotFound(frame["message"])
                await self._send(frame)

    async def disconnect(self, code: int) -> None:
        if self.stream is not None and (
            self.stream.stats.events_repaired or self.stream.stats.snapshots_repaired
        ):
            stats = self.stream.stats
            logger.info(
                "socket of session %s repaired %d events from the log and %d parts by snapshot "
                "(%d duplicate deltas dropped)",
                self.session.pk,
                stats.events_repaired,
                stats.snapshots_repaired,
                stats.deltas_dropped,
            )
        try:
            if self.forwarding is not None and self.forwarding is not asyncio.current_task():
                self.forwarding.cancel()
                await asyncio.gather(self.forwarding, return_exceptions=True)
        finally:
            # Even when the server cancels this disconnect (daphne and the test
            # communicator give it a moment only), the hub must let the socket go.
            await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        """Leave the session's hub and give the stream slot back (once): on disconnect, or
        when the server closes."""
        subscription, self.subscription = self.subscription, None
        if subscription is not None:
            await subscription.close()

    async def _close_refused(self, code: int) -> None:
        if self.forwarding is not None:
            self.forwarding.cancel()
            await asyncio.gather(self.forwarding, return_exceptions=True)
        await self._unsubscribe()
        await self.close(code=code)

    async def _refused(self, exc: ForgeError, **extra: Any) -> None:
        """A prompt or an answer whose asker or session fails the check again: a session
        deleted since the socket opened gets ``not_found`` and 4404, as at connect (the
        page says the session does not exist; 4401 sent it to the login page); a caller
        no longer signed in or no longer a member (a token deleted, a user deactivated,
        logged out or gone from the tenant) gets ``not_authenticated`` and 4401."""
        if isinstance(exc, NotFound):
            await self._error(exc.code, str(exc), **extra)
            await self._close_refused(CLOSE_NOT_FOUND)
        else:
            await self._error("not_authenticated", str(exc), **extra)
            await self._close_refused(CLOSE_UNAUTHENTICATED)

    async def _send(self, frame: Frame) -> None:
        await self.send(text_data=hub.encode(frame))
        metrics.frames_sent("socket", frames=1, deltas=is_delta(frame))

    async def _error(self, code: str, message: str, **extra: Any) -> None:
        await self._send(error_frame(code, message, **extra))

    # --- from the client ----------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.stream is None:
            return
        raw = text_data if text_data is not None else (bytes_data or b"").decode("utf-8", "replace")
        if len(raw.encode("utf-8", "surrogatepass")) > MAX_FRAME_BYTES:
            await self._error("too_large", f"frames are limited to {MAX_FRAME_BYTES} bytes")
            return
        try:
            content = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
        except json.JSONDecodeError:
            await self._error("bad_json", "a frame must be a JSON object")
            return
        except _NotJsonNumber as exc:
            await self._error("bad_json", f"the frame holds {exc}, which is no JSON number")
            return
        except ValueError:  # the decoder's cap on an integer's digits, the one other refusal
            digits = sys.get_int_max_str_digits()
            await self._error("bad_json", f"a number in the frame has more than {digits} digits")
            return
        except RecursionError:  # as the HTTP parser says it (forge.api.parsers)
            await self._error("bad_json", "the frame's JSON is nested too deeply")
            return
        if not isinstance(content, dict):
            await self._error("bad_frame", "a frame must be a JSON object with a type")
            return
        kind = content.get("type")
        handler = {
            "prompt": self._prompt,
            "abort": self._abort,
            "ping": self._ping,
            "snapshot": self._snapshot,
            "approval": self._approval,
        }.get(kind if isinstance(kind, str) else "")
        if handler is None:
            await self._error(
                "unknown_type",
                f"unknown frame type {str(kind)[:40]!r}; "
                "known: prompt, abort, ping, snapshot, approval",
            )
            return
        client_id = content.get("client_id")
        if client_id is not None and (
            not isinstance(client_id, str) or len(client_id) > CLIENT_ID_MAX
        ):
            await self._error(
                "bad_frame",
                f"client_id must be a string of at most {CLIENT_ID_MAX} characters",
                client_id=None,
            )
            return
        # Half a surrogate pair (an escape, "\ud800") is no UTF-8 text: neither the log,
        # nor a query, nor a frame can hold it. An ASCII frame without such an escape
        # holds none, and is not walked.
        maybe = not raw.isascii() or "\\ud" in raw or "\\uD" in raw
        if maybe and (where := surrogate_path(content, "frame")):
            await self._not_text(str(kind), content, where)
            return
        await handler(content)

    async def _not_text(self, kind: str, content: dict[str, Any], where: str) -> None:
        """The error frame for a frame holding a lone surrogate at ``where``: a prompt's
        is ``invalid_prompt`` and an answer's ``invalid_answer`` (as a NUL in them is),
        with the frame's id when that id is text; any other frame's ``bad_frame``."""
        code, key = {
            "prompt": ("invalid_prompt", "client_id"),
            "approval": ("invalid_answer", "call_id"),
        }.get(kind, ("bad_frame", ""))
        extra: dict[str, Any] = {}
        if key:
            value = content.get(key)
            if key == "call_id":
                extra[key] = _echoed_call_id(value)
            else:
                extra[key] = (
                    value if isinstance(value, str) and not holds_surrogate(value) else None
                )
        message = (
            f"the {where} holds a lone surrogate (U+D800-U+DFFF, half a UTF-16 pair), "
            "which is no text"
        )
        await self._error(code, message, **extra)

    async def _ping(self, content: dict[str, Any]) -> None:
        await self._send(pong_frame())

    async def _snapshot(self, content: dict[str, Any]) -> None:
        if not await self._still_admitted():
            return
        assert self.stream is not None  # (receive() takes no frame before connect ends)
        for snapshot in await runtime.snapshots(self.session.pk):
            # Checked at each send: the forwarding task may have sent the part's end
            # (its whole text) while the snapshots were read or the earlier ones sent.
            frame = self.stream.snapshot_for_client(snapshot)
            if frame is not None:
                await self._send(frame)

    async def _prompt(self, content: dict[str, Any]) -> None:
        client_id = content.get("client_id")
        if "files" in content:  # acked and run, the files dropped without a word (QA)
            await self._error(
                "invalid_prompt",
                "a prompt's files are sent over HTTP: POST /api/sessions/{id}/messages/ "
                "as multipart/form-data",
                client_id=client_id,
            )
            return
        # Who is asking is checked again for every prompt: a token deleted, a user
        # deactivated or logged out, or removed from the tenant since the socket
        # opened can watch no longer and start nothing (4401); a session deleted since
        # is gone (4404). The fresh session also carries a title or agent changed since.
        throttle = PromptRateThrottle()
        try:
            session, speaker, allowed = await self._admit(throttle)
        except ForgeError as exc:
            await self._refused(exc, client_id=client_id)
            return
        if not allowed:
            wait = throttle.wait()
            await self._error(
                "throttled",
                "too many prompts; try again later",
                client_id=client_id,
                retry_after=None if wait is None else round(wait, 1),
            )
            return
        try:
            started = await runtime.start_turn(
                session=session,
                text=content.get("text"),
                agent=content.get("agent"),
                speaker=speaker,  # memory is the speaker's, whoever owns the session
            )
        except ForgeError as exc:
            await self._error(exc.code, str(exc), client_id=client_id, **exc.extra)
            return
        except Exception:
            await self._failed("prompt", client_id=client_id)
            return
        await self._send(
            ack_frame(
                client_id=client_id,
                message_id=started.message["info"]["id"],
                assistant_message_id=started.assistant_message_id,
            )
        )

    async def _approval(self, content: dict[str, Any]) -> None:
        """``{"type": "approval", "call_id", "approve", "reason"?}``: the answer to a tool
        call awaiting approval (``runtime.answer``, as the REST route); refusals are
        error frames carrying the call id."""
        call_id = content.get("call_id")
        extra = {"call_id": _echoed_call_id(call_id)}
        try:
            session, user, _ = await self._admit(None)
        except ForgeError as exc:
            await self._refused(exc, **extra)
            return
        try:
            await runtime.answer(
                session=session,
                user=user,
                call_id=call_id,  # type: ignore[arg-type]  # checked by the runtime
                approve=content.get("approve"),  # type: ignore[arg-type]
                reason=content.get("reason", ""),
            )
        except ForgeError as exc:
            await self._error(exc.code, str(exc), **extra)
        except Exception:
            await self._failed("answer", **extra)

    async def _failed(self, what: str, **extra: Any) -> None:
        """A prompt or an answer that failed on the server's side (the database went
        away meanwhile: the runtime's next unit of work has a new connection): logged,
        and said in an error frame as HTTP says a 500, the socket left open. It closed
        the socket (1011) before (QA)."""
        logger.exception("the %s on the socket of session %s failed", what, self.session.pk)
        await self._error("server_error", "the server failed; it has been logged", **extra)

    async def _admit(self, throttle: PromptRateThrottle | None) -> tuple[Session, Any, bool]:
        """The session as of now, the socket's user as of now (the prompt's speaker), and
        whether the prompt throttle lets this prompt through: one trip to the database
        thread for a token socket (many sockets prompting at once queue on that one
        thread)."""

        def check(user: Any) -> tuple[Session, Any, bool]:
            session = session_of(user, self.session.pk)
            return session, user, throttle is None or throttle.allow_user(user)

        token = authorization(self.scope)
        if token is not None:
            return await database_sync_to_async(
                lambda: check(user_for_authorization(token or b" "))
            )()
        return await database_sync_to_async(check)(await current_user(self.scope))

    async def _abort(self, content: dict[str, Any]) -> None:
        # Aborting waits for the turn to be finalized; do it beside, not inside, this handler.
        asyncio.get_running_loop().create_task(self._abort_now(content.get("client_id")))

    async def _still_admitted(self, **extra: Any) -> bool:
        """Whether the socket's caller may still act on its session (as a prompt checks
        it); if not, the refusal is sent and the socket closed (4401 / 4404). An abort
        or a snapshot asked for by a user whose token was deleted, who logged out or left
        the tenant was carried out (QA): an abort ended a member's reply."""
        try:
            await self._admit(None)
        except ForgeError as exc:
            await self._refused(exc, **extra)
            return False
        return True

    async def _abort_now(self, client_id: Any) -> None:
        if not await self._still_admitted(client_id=client_id):
            return
        try:
            await runtime.abort_turn(session=self.session)
        except ForgeError as exc:  # abort_unavailable, still_running: with their retry_after
            await self._error(exc.code, str(exc), client_id=client_id, **exc.extra)
        except Exception:
            logger.exception("abort of session %s failed", self.session.pk)
            await self._error("abort_failed", "the turn could not be aborted", client_id=client_id)
