"""A client that stops reading is cut, instead of being buffered for without end.

Under daphne an application's ``send`` never waits: daphne hands each message to
twisted, whose transport keeps whatever the socket does not take in its write
buffer. A stream (SSE, the AI SDK's, a socket) whose client stops reading therefore
grew that buffer by every frame of every reply, and the hub's ``QUEUE_LIMIT``
(drop-and-repair) never came into play, since the stream always took its frames at
once (QA: 20 SSE clients that never read, 2 MB of replies, +170 MB of RSS, kept after
they closed). A socket is cut by autobahn's ping timeout in the end; SSE by nothing.

:func:`install` gives every streaming connection a :class:`Watch`, a streaming producer
registered with its transport, which twisted tells when the write buffer passes its
high-water mark (``pauseProducing``) and when it has drained (``resumeProducing``):

* While the buffer is full, the connection's sends of body data (a streaming
  response's chunks, a socket's messages) wait until it drains. So what is buffered for
  one client stays within the high-water mark (64 KiB) and the one message that
  passed it, per task sending; the stream, not taking its frames meanwhile, falls
  behind in its hub queue, which is bounded and repaired from the log. A replay of a
  long log goes at the client's pace rather than into memory at once, so a fast
  client is never cut for the size of what it asked for.
* A connection whose buffer stays full for ``FORGE_STREAM_STALL_SECONDS`` without
  draining once is cut: ``abortConnection``, which drops what was buffered for it at
  once instead of waiting to flush it. One line is logged and
  ``forge_slow_clients_cut`` counts it. Its client reconnects and resumes from the
  last seq it read (``?after=`` / ``Last-Event-ID``), missing nothing: a cut costs a
  reconnection, never an event. A client that reads, however slowly, drains the
  buffer (at most the mark plus one message) within that time and is left alone.
* The start of a response, a socket's accept and its close never wait (a close must
  not queue behind the data it ends), and a wait ends when the connection is lost
  (daphne then drops the send, as it does any send to a closed connection).

Requests that are answered in one body message (every non-streaming response) get
no watch. Under another server nothing is installed; its own flow control applies.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.conf import settings

from forge.telemetry import metrics

logger = logging.getLogger(__name__)

_WAITING_TYPES = frozenset({"http.response.body", "websocket.send"})


class Watch:
    """One connection's flow control: twisted's ``IPushProducer`` for its transport
    (see the module's docstring). Runs on the reactor's thread, which under daphne is
    the asyncio loop's: futures are resolved from twisted's callbacks directly."""

    def __init__(self, protocol: Any, transport: Any, *, face: str, stall: float) -> None:
        self.protocol = protocol
        self.transport = transport
        self.face = face
        self.stall = stall
        self.paused = False
        self.lost = False
        self._waiters: list[asyncio.Future[None]] = []
        self._timer: Any = None

    # --- IPushProducer (called by twisted) -------------------------------------------

    def pauseProducing(self) -> None:
        if self.paused or self.lost:
            return
        self.paused = True
        from twisted.internet import reactor as twisted_reactor

        reactor: Any = twisted_reactor  # the running reactor (its stubs type the module)
        self._timer = reactor.callLater(self.stall, self._cut)

    def resumeProducing(self) -> None:
        self.paused = False
        self._cancel_timer()
        self._release()

    def stopProducing(self) -> None:
        """The connection is going: nothing waits for it any more."""
        self.lost = True
        self.resumeProducing()

    # --- the application's side ---------------------------------------------------------

    async def drained(self) -> None:
        """Return once the buffer has drained (or the connection is gone)."""
        while self.paused and not self.lost:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _release(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _cut(self) -> None:
        self._timer = None
        if not self.paused or self.lost:
            return
        peer = _peer(self.transport)
        logger.warning(
            "cut a slow client (%s, %s): its %s stream's write buffer did not drain for "
            "%.1f s; it resumes from its last seq when it reconnects",
            peer,
            _path(self.protocol),
            self.face,
            self.stall,
        )
        metrics.slow_client_cut(self.face)
        self.lost = True
        self._release()
        abort = getattr(self.transport, "abortConnection", None)
        if abort is not None:
            abort()  # what was buffered is dropped now, not flushed to a client not reading
        else:
            self.transport.loseConnection()


def _peer(transport: Any) -> str:
    try:
        peer = transport.getPeer()
        return f"{peer.host}:{peer.port}"
    except Exception:
        return "?"


def _path(protocol: Any) -> str:
    path = getattr(protocol, "path", b"")  # daphne's request and socket both have one
    if isinstance(path, bytes):
        path = path.decode("latin-1", "replace")
    return str(path).split("?", 1)[0]


def watch_for(protocol: Any, message: dict[str, Any]) -> Watch | None:
    """The connection's watch, registered with its transport on its first streamed
    message; None for a connection that is not streaming or is gone."""
    watch: Watch | None = getattr(protocol, "_forge_watch", None)
    if watch is not None:
        return watch
    stall = float(settings.FORGE_STREAM_STALL_SECONDS)
    if stall <= 0:
        return None  # turned off
    if message["type"] == "http.response.body":
        channel = getattr(protocol, "channel", None)
        if not message.get("more_body") or channel is None or protocol.finished:
            return None  # answered in one message: nothing streams
        watch = Watch(protocol, channel.transport, face="http", stall=stall)
        # The request passes its producer to the channel, which the transport already
        # has as its own producer, and which passes pause and resume on.
        protocol.registerProducer(watch, True)
    else:
        transport = getattr(protocol, "transport", None)
        if transport is None:
            return None
        watch = Watch(protocol, transport, face="socket", stall=stall)
        # The upgraded connection's transport still has the HTTP channel it came in on
        # as its producer; that channel no longer speaks on it.
        transport.unregisterProducer()
        transport.registerProducer(watch, True)
    protocol._forge_watch = watch
    return watch


def install() -> None:
    """Make daphne's sends wait for slow clients and cut stalled ones (see the module's
    docstring). Idempotent; does nothing without daphne."""
    try:
        from daphne import server
    except ImportError:  # not served by daphne
        return
    base: Any = server.Server
    if getattr(base, "forge_slow_clients", False):
        return
    reply = base.handle_reply

    async def handle_reply(self: Any, protocol: Any, message: dict[str, Any]) -> None:
        if message.get("type") in _WAITING_TYPES:
            watch = watch_for(protocol, message)
            if watch is not None:
                await watch.drained()
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    _detach(protocol, watch)
        await reply(self, protocol, message)

    base.handle_reply = handle_reply
    base.forge_slow_clients = True


def _detach(protocol: Any, watch: Watch) -> None:
    """A response's last body: twisted wants its producer gone before it finishes."""
    watch.stopProducing()
    if getattr(protocol, "producer", None) is watch and protocol.channel is not None:
        protocol.unregisterProducer()
