"""Connections to MCP servers, one per server spec and process, on their own event loop.

The SDK's transports are anyio task groups: entered and left in one task, on one
loop. A connection outlives the turn (and the event loop) that first used it, so
every connection lives on a private loop in a daemon thread; callers on any loop
or thread hand it coroutines (:func:`submit`).

A :class:`Connection` runs one task: open the transport, initialize, list the
tools, then wait until it is closed or the transport's stream ends (a stdio
server's process exited): then it is not ``alive``, and the next listing or call
starts it again. A stdio server is started once per process and reused across
turns; a call finding it dead (or an HTTP server gone) opens it again, once,
before failing. A server's own listing is cached per connection; a restart lists
again. A start has its timeout, stopping included; a failed start is remembered
for the caller's ``retry_after`` and reported again at once meanwhile.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage

from .lenient import relay
from .spec import ServerSpec, masked_text

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Errors the SDK makes up itself, as (code, message): its streamable HTTP client answers
# a request the server refused with 404 (it no longer knows the session: it restarted)
# with the first, and a session fails every request still waiting when its transport's
# stream ends with the second. A server may send either code itself (-32000 is JSON-RPC's
# "server error"); then it is that server's answer to the call, and its message says why.
SESSION_TERMINATED = (32600, "Session terminated")
CONNECTION_CLOSED = (mcp_types.CONNECTION_CLOSED, "Connection closed")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _mcp_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="forge-mcp", daemon=True).start()
            _loop = loop
        return _loop


def submit(work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``work`` on the MCP loop; the future's cancellation cancels it there."""
    return asyncio.run_coroutine_threadsafe(work, _mcp_loop())


async def run(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` run on the MCP loop from any other loop (cancellation reaches it)."""
    return await asyncio.wrap_future(submit(work))


RELIST_TIMEOUT = 5.0  # seconds to read a server's changed tool list


class ServerDown(Exception):
    """The server could not be started or reached, or died."""


class _ClientSession(ClientSession):
    """The SDK's session, noting the id of each request while the task that sent it
    waits for the answer: a call a person stopped is cancelled on the server by that id
    (MCP's ``notifications/cancelled``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_ids: dict[asyncio.Task[Any], mcp_types.RequestId] = {}

    async def send_request(self, request: Any, result_type: Any, *args: Any, **kwargs: Any) -> Any:
        task = asyncio.current_task()
        if task is not None:
            self.request_ids[task] = self._request_id  # the id the SDK gives it next
        try:
            return await super().send_request(request, result_type, *args, **kwargs)
        finally:
            if task is not None:
                self.request_ids.pop(task, None)


class Connection:
    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.session: _ClientSession | None = None
        self.tools: list[mcp_types.Tool] = []
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closed = asyncio.Event()  # set: close the connection
        self._down = asyncio.Event()  # set: the connection ended
        self._lock = asyncio.Lock()
        self.suspect = False  # the last call did not end well: reconnect before the next
        self._reaper: asyncio.Task[None] | None = None
        # (time.monotonic(), reason) of the last start that failed; None once one works.
        self._failed: tuple[float, str] | None = None
        self._cancels: set[asyncio.Task[None]] = set()  # notices of calls stopped, being sent
        # Calls running on the connection: one connection serves every session of the
        # process, so a suspect one is stopped only once none is left on it.
        self._in_flight = 0
        self._idle = asyncio.Event()  # set while no call runs on the connection
        self._idle.set()
        # The server said its tool list changed (``notifications/tools/list_changed``):
        # the next listing asks for it again (:meth:`current_tools`).
        self._tools_changed = False

    @property
    def alive(self) -> bool:
        """Started, and neither closed nor ended by the server (its process exited)."""
        return (
            self._task is not None
            and not self._task.done()
            and self.session is not None
            and not self._closed.is_set()
        )

    def settled(self, retry_after: float) -> bool:
        """Whether a listing now would answer at once: alive with its tool list unchanged,
        or failed less than ``retry_after`` seconds ago (its failure is given again)."""
        failed = self._failed
        if self.alive:
            return not self._tools_changed  # (else its tools are asked for again)
        return failed is not None and time.monotonic() - failed[0] < retry_after

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        spec = self.spec
        if spec.command:
            env = {**get_default_environment(), **dict(spec.env)}
            if "PATH" not in dict(spec.env):
                env["PATH"] = os.environ.get("PATH", env.get("PATH", ""))
            # A byte that is not UTF-8 is U+FFFD: strict decoding ended the transport, the
            # server restarted and every call on it failed as "went away" (QA).
            params = StdioServerParameters(
                command=spec.command,
                args=list(spec.args),
                env=env,
                encoding_error_handler="replace",
            )
            # The server's stderr is its log: not ours to show (it may echo secrets).
            with open(os.devnull, "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    yield read, write
            return
        async with (
            create_mcp_http_client(headers=dict(spec.headers) or None) as client,
            streamable_http_client(spec.url, http_client=client) as (read, write, _),
        ):
            yield read, write

    async def _serve(self, ready: asyncio.Future[None]) -> None:
        """The connection's task: open, initialize, list, then serve until
        ``_closed`` is set, by :meth:`_stop` or by the server's end.

        The session reads the transport through :func:`_relay`, which sets
        ``_closed`` when the transport's stream ends (a stdio server's stdout closes
        when its process exits): a server that died between prompts is then not
        ``alive`` and the next listing starts it again, instead of answering from
        the dead process's tool list. Nothing else notices an exit: the SDK's
        session only fails the requests in flight.
        """
        closed = self._closed
        try:
            async with (
                self._transport() as (read, write),
                anyio.create_task_group() as relays,
            ):
                send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                relays.start_soon(relay, read, send, closed)
                try:
                    async with _ClientSession(
                        receive, write, message_handler=self._on_message
                    ) as session:
                        await session.initialize()
                        listed = await session.list_tools()
                        self.session, self.tools = session, list(listed.tools)
                        if ready.done():  # the start timed out (or its caller left)
                            return
                        ready.set_result(None)
                        await closed.wait()
                finally:
                    relays.cancel_scope.cancel()  # the relay would wait for the server
        except BaseException as exc:  # anyio wraps failures in exception groups
            if not ready.done():
                ready.set_exception(ServerDown(reason(exc, self.spec)))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.session = None
            self._down.set()

    async def _on_message(self, message: Any) -> None:
        """What the server sends unasked: a changed tool list is noted (and asked for at
        the next listing; before, the tools of its start were offered until a restart)."""
        root = getattr(message, "root", None)
        if isinstance(root, mcp_types.ToolListChangedNotification):
            self._tools_changed = True

    async def current_tools(self, timeout: float) -> list[mcp_types.Tool]:
        """The server's tools: as listed at its start, or again when it said they changed
        since (a failure to list them again keeps the last list, and asks next time)."""
        session = self.session
        if self._tools_changed and session is not None:
            # Asked once per notification, within a few seconds: a server that says its
            # tools changed and then hangs on the list must not hold up every prompt.
            self._tools_changed = False
            try:
                async with asyncio.timeout(min(timeout, RELIST_TIMEOUT)):
                    self.tools = list((await session.list_tools()).tools)
            except Exception as exc:
                logger.warning(
                    "MCP server %r: its changed tool list could not be read (%s); the last "
                    "one is used until it says they changed again",
                    self.spec.name,
                    reason(exc, self.spec),
                )
        return list(self.tools)

    async def start(self, timeout: float, retry_after: float = 0.0) -> None:
        """Open the connection unless it is alive; :class:`ServerDown` when it cannot.

        Invariants: the caller waits at most ``timeout`` for the start itself (spawn,
        initialize, list): a start that does not finish in time is cancelled and left
        to stop in the background (closing a stdio server that does not answer takes
        seconds: stdin closed, then SIGTERM, then SIGKILL), and the next start or
        :meth:`close` awaits that stop. A start that failed is remembered: for
        ``retry_after`` seconds after it, :meth:`start` raises its :class:`ServerDown`
        again at once instead of trying (every prompt lists its agent's tools, so
        without it a server that never starts would cost every prompt its timeout).
        Callers waiting on the lock behind a failing start get that failure too.
        """
        async with self._lock:
            if self.alive:
                return
            if self._failed is not None:
                failed_at, reason = self._failed
                if time.monotonic() - failed_at < retry_after:
                    raise ServerDown(reason)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            await self._stop()  # a previous start still stopping: part of this one's time
            self._closed, self._down = asyncio.Event(), asyncio.Event()
            ready: asyncio.Future[None] = loop.create_future()
            self._task = loop.create_task(self._serve(ready))
            try:
                # Not shielded: on a timeout ``ready`` is cancelled, so nothing sets (and
                # nobody has to retrieve) its exception later.
                await asyncio.wait_for(ready, max(0.0, deadline - loop.time()))
            except TimeoutError:
                self._task.cancel()  # stops in the background; awaited by the next _stop
                self._failed = (time.monotonic(), f"did not answer within {timeout:g} s")
                raise ServerDown(self._failed[1]) from None
            except ServerDown as exc:
                self._failed = (time.monotonic(), str(exc))
                await self._stop()
                raise
            except BaseException:  # the caller left (cancelled): nobody wants this start
                self._task.cancel()
                raise
            self._failed = None

    async def _stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._closed.set()
        try:
            async with asyncio.timeout(5):
                await asyncio.gather(task, return_exceptions=True)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        async with self._lock:
            await self._stop()
            self.suspect = False

    async def _close_if_idle(self) -> None:
        """:meth:`close`, unless a call started meanwhile (it would fail with it)."""
        async with self._lock:
            if self.suspect and not self._in_flight:
                await self._stop()
                self.suspect = False

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float,
        retry_after: float = 0.0,
        stopped: Callable[[], bool] | None = None,
    ) -> mcp_types.CallToolResult:
        """Call ``tool``; :class:`ServerDown` when the server dies during the call.

        A call that did not end well (the server died, or the caller gave up: a
        timeout) leaves the connection suspect: the next call opens a new one first
        (a stdio server is started again; a hanging one is stopped), once no other
        call runs on it (they are other sessions'). A server found
        dead before the request went out (it died between calls), or an HTTP server
        that no longer knows the session, is connected again and the call sent once
        more. An HTTP server that dies during a call may leave it unanswered (the SDK
        waits for it to come back): the caller's timeout ends it. A server that failed
        to start less than ``retry_after`` seconds ago is not started (:meth:`start`).
        A call given up because ``stopped()`` (a person stopped the turn) is cancelled on
        the server, which is kept: it did nothing wrong (QA: every stop restarted it, and
        a stateful server, a browser's, lost its state, every session's).
        """
        if self.suspect:
            # Other sessions' calls may still run on it: they get up to this call's
            # timeout to end, then the server is replaced anyway (a hung server must
            # not take every overlapping call with it for ever).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._idle.wait()
            await self.close()
        for attempt in (1, 2):
            await self.start(timeout, retry_after)
            try:
                return await self._call_once(tool, arguments, stopped)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self.close()  # not sent: the transport was gone already
                if attempt == 2:
                    raise ServerDown("the server is gone") from None
            except McpError as exc:
                said = (exc.error.code, exc.error.message)
                terminated = said == SESSION_TERMINATED and bool(self.spec.url)
                if terminated and attempt == 1:
                    await self.close()  # refused, not run: a new session, sent again
                    continue
                if terminated or said == CONNECTION_CLOSED:
                    self.suspect = True
                    raise ServerDown("the server went away during the call") from None
                raise  # the server's own answer: a tool error with its message
        raise ServerDown("the server is gone")  # pragma: no cover (the loop returns or raises)

    async def _call_once(
        self, tool: str, arguments: dict[str, Any], stopped: Callable[[], bool] | None = None
    ) -> mcp_types.CallToolResult:
        """The call, raced against the connection going down (the SDK does not always
        fail a request whose transport died: its error is sent from a cancelled scope)."""
        session, down = self.session, self._down
        if session is None:
            raise anyio.ClosedResourceError
        request = asyncio.ensure_future(session.call_tool(tool, arguments))
        waiter = asyncio.ensure_future(down.wait())
        self._in_flight += 1
        self._idle.clear()
        try:
            await asyncio.wait({request, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            if stopped is not None and stopped():
                self._cancel_on_server(session, request)
                raise
            # The caller gave up (a timeout): the server may hang. Stop it now, so the
            # next turn's listing starts a fresh one (within the start timeout, not
            # within its call's), unless other calls still run on it: they are other
            # sessions' (QA: they failed as "the server went away"). Then the next call
            # made with none left on it starts a fresh one.
            self.suspect = True
            if self._in_flight == 1:
                self._reaper = asyncio.get_running_loop().create_task(self._close_if_idle())
            raise
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()
                if self.suspect and (self._reaper is None or self._reaper.done()):
                    # The last call on a suspect connection ended: replace it now.
                    self._reaper = asyncio.get_running_loop().create_task(self._close_if_idle())
            waiter.cancel()
            if not request.done():
                request.cancel()
                await asyncio.gather(request, return_exceptions=True)
        if request.cancelled():
            self.suspect = True
            raise ServerDown("the server went away during the call")
        return request.result()

    def _cancel_on_server(self, session: _ClientSession, request: asyncio.Future[Any]) -> None:
        """Tell the server that ``request`` (a call still waiting) is cancelled, in the
        background (best effort: the caller is being cancelled)."""
        request_id = session.request_ids.get(request) if isinstance(request, asyncio.Task) else None
        if request_id is None or request.done():
            return
        notice = mcp_types.ClientNotification(
            mcp_types.CancelledNotification(
                params=mcp_types.CancelledNotificationParams(
                    requestId=request_id, reason="the user stopped the turn"
                )
            )
        )
        sending = asyncio.get_running_loop().create_task(session.send_notification(notice))
        self._cancels.add(sending)
        sending.add_done_callback(self._cancels.discard)
        sending.add_done_callback(_retrieved)


def _retrieved(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # a server gone meanwhile: nothing to tell it


def reason(exc: BaseException, spec: ServerSpec | None = None) -> str:
    """The first leaf of an exception (group), in a few words, for a notice; the secrets
    of ``spec`` (its env, headers, those in its args) and of URLs masked."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = masked_text(text, spec)[:300]  # httpx quotes the URL, with its ?api_key=…
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_connections: dict[ServerSpec, Connection] = {}


def existing(spec: ServerSpec) -> Connection | None:
    """The connection of ``spec`` if one was made (from any thread; no lock)."""
    return _connections.get(spec)


def connection(spec: ServerSpec) -> Connection:
    """The process's connection for ``spec`` (call on the MCP loop)."""
    found = _connections.get(spec)
    if found is None:
        found = _connections[spec] = Connection(spec)
    return found


async def close_all() -> None:
    """Close every connection (tests; process exit)."""

    async def close() -> None:
        items = list(_connections.values())
        _connections.clear()
        await asyncio.gather(*(c.close() for c in items), return_exceptions=True)

    await run(close())
