"""The session socket: ``/ws/sessions/{id}/?after=SEQ`` (CONTRACT §4).

On connect the log after ``after``, then snapshots of what is still streaming,
then live frames, with no gap and no duplicate (``sessions.streaming``).
Client frames: ``prompt``, ``abort``, ``ping``, and ``snapshot`` (ask again for
the text of streaming parts). Turns run as their own tasks; this consumer only
starts and stops them through ``forge.runtime``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from accounts.selectors import NoTenant, tenant_for_user

from . import hub, selectors
from .exceptions import ForgeError, NotFound
from .models import Session
from .streaming import SessionStream, snapshot_frame

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_BAD_REQUEST = 4400
MAX_FRAME_BYTES = 1024 * 1024


def _find_session(user: Any, session_id: str) -> Session:
    tenant = tenant_for_user(user)
    return selectors.get_session(tenant=tenant, session_id=session_id)


class SessionConsumer(AsyncWebsocketConsumer):
    # No channel-layer channel of its own: frames arrive through sessions.hub, one
    # subscription per session per process (Channels skips the layer for an alias
    # that names none).
    channel_layer_alias = None

    session: Session
    stream: SessionStream | None = None
    subscription: Any = None
    forwarding: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        from forge import runtime

        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        try:
            self.session = await database_sync_to_async(_find_session)(user, session_id)
        except (NotFound, NoTenant):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        after = self._after()
        if after is None:
            await self._error("invalid_cursor", "after must be a non-negative integer")
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        self.stream = SessionStream(session=self.session, after=after, snapshots=runtime.snapshots)
        # Subscribe first: frames published from now on wait in our queue until the
        # backlog has been sent, and the stream drops what the backlog already covered.
        self.subscription = hub.subscribe(self.session.pk)
        subscriber = await self.subscription.__aenter__()
        try:
            for frame in await self.stream.backlog():
                await self._send(frame)
        except BaseException:
            # Channels does not call disconnect() when connect() fails: leave here.
            subscription, self.subscription = self.subscription, None
            await subscription.__aexit__(None, None, None)
            raise
        self.forwarding = asyncio.get_running_loop().create_task(self._forward(subscriber))

    async def _forward(self, subscriber: hub.Subscriber) -> None:
        """Live frames, through the stream's dedupe and repair, to the client."""
        assert self.stream is not None
        quiet = settings.FORGE_STREAM_RESYNC_SECONDS
        while True:
            try:
                frames = await asyncio.wait_for(subscriber.batch(), timeout=quiet)
            except TimeoutError:
                if self.stream.needs_resync:  # activity went quiet: was its tail lost?
                    for out in await self.stream.resync():
                        await self._send(out)
                continue
            for frame in frames:
                for out in await self.stream.accept(frame):
                    await self._send(out)

    def _after(self) -> int | None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        raw = query.get("after", ["0"])[-1]
        return int(raw) if raw.isdigit() else None

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
            if self.forwarding is not None:
                self.forwarding.cancel()
                await asyncio.gather(self.forwarding, return_exceptions=True)
        finally:
            # Even when the server cancels this disconnect (daphne and the test
            # communicator give it a moment only), the hub must let the socket go.
            subscription, self.subscription = self.subscription, None
            if subscription is not None:
                await subscription.__aexit__(None, None, None)

    async def _send(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=hub.encode(frame))

    async def _error(self, code: str, message: str, **extra: Any) -> None:
        await self._send({"kind": "error", "code": code, "message": message, **extra})

    # --- from the client ----------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.stream is None:
            return
        raw = text_data if text_data is not None else (bytes_data or b"").decode("utf-8", "replace")
        if len(raw.encode()) > MAX_FRAME_BYTES:
            await self._error("too_large", f"frames are limited to {MAX_FRAME_BYTES} bytes")
            return
        try:
            content = json.loads(raw)
        except ValueError:
            await self._error("bad_json", "a frame must be a JSON object")
            return
        if not isinstance(content, dict):
            await self._error("bad_frame", "a frame must be a JSON object with a type")
            return
        handler = {
            "prompt": self._prompt,
            "abort": self._abort,
            "ping": self._ping,
            "snapshot": self._snapshot,
        }.get(content.get("type"))  # type: ignore[arg-type]
        if handler is None:
            await self._error(
                "unknown_type",
                f"unknown frame type {content.get('type')!r}; known: prompt, abort, ping, snapshot",
            )
            return
        await handler(content)

    async def _ping(self, content: dict[str, Any]) -> None:
        await self._send({"kind": "pong"})

    async def _snapshot(self, content: dict[str, Any]) -> None:
        from forge import runtime

        for snapshot in await runtime.snapshots(self.session.pk):
            if self.stream is not None:
                self.stream.sent[snapshot["part_id"]] = len(snapshot["text"])
            await self._send(snapshot_frame(snapshot))

    async def _prompt(self, content: dict[str, Any]) -> None:
        from forge import runtime

        client_id = content.get("client_id")
        text = content.get("text")
        agent = content.get("agent")
        if not isinstance(text, str):
            await self._error("invalid_prompt", "prompt needs a text", client_id=client_id)
            return
        if len(text.encode()) > settings.FORGE_MAX_PROMPT_BYTES:
            await self._error(
                "too_large",
                f"the prompt is larger than {settings.FORGE_MAX_PROMPT_BYTES} bytes",
                client_id=client_id,
            )
            return
        if agent is not None and not isinstance(agent, str):
            await self._error("invalid_prompt", "agent must be a name", client_id=client_id)
            return
        await database_sync_to_async(self.session.refresh_from_db)()
        try:
            started = await runtime.start_turn(session=self.session, text=text, agent=agent)
        except ForgeError as exc:
            await self._error(exc.code, str(exc), client_id=client_id)
            return
        await self._send(
            {
                "kind": "ack",
                "client_id": client_id,
                "message_id": started.message["info"]["id"],
                "assistant_message_id": started.assistant_message_id,
            }
        )

    async def _abort(self, content: dict[str, Any]) -> None:
        # Aborting waits for the turn to be finalized; do it beside, not inside, this handler.
        asyncio.get_running_loop().create_task(self._abort_now(content.get("client_id")))

    async def _abort_now(self, client_id: Any) -> None:
        from forge import runtime

        try:
            await runtime.abort_turn(session=self.session)
        except ForgeError as exc:
            await self._error(exc.code, str(exc), client_id=client_id)
        except Exception:
            logger.exception("abort of session %s failed", self.session.pk)
            await self._error("abort_failed", "the turn could not be aborted", client_id=client_id)
