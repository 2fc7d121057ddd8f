"""Running turns: the one entry every face starts a turn through, the turns this
process runs, and aborting them.

A turn runs as its own asyncio task in the process that took the session's
lease; it never runs inside a consumer's receive handler. While it runs, a
heartbeat renews the lease (``heartbeat``: a lost lease stops the turn); it starts
inside the cleanup that stops it, so nothing outlives its turn. Aborts from other
processes arrive in this process's abort inbox (``inbox``), whose handler here
stops the session's turn if this process runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from channels.layers import get_channel_layer
from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from accounts import tenancy
from forge.db.worker import db
from forge.errors import NotRunning, StillRunning
from forge.telemetry import tracing
from forge.tools import mcp
from sessions import services
from sessions.models import Session

from . import heartbeat, inbox, lease
from .compaction import prepare_manual, run_manual
from .prompting import Attachment, McpServersStarting
from .recovery import abort_dead_holder, abort_unheld, reply_open
from .regenerate import begin_regeneration
from .shielding import finish_then_cancel
from .steps import Resume, begin_turn, run_turn
from .subtask import subtask_runner
from .title import title_later
from .turn import Turn

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class StartedTurn:
    session_id: str
    message: dict[str, Any]  # the user message, {info, parts}
    assistant_message_id: str
    task: asyncio.Task[None]


@dataclass
class _Runner:
    turn: Turn
    task: asyncio.Task[None]


# The turns this process runs, by session id.
_runners: dict[str, _Runner] = {}
# Sessions whose turn is starting here (``starting``): its transaction may have taken
# the lease, and committed, before its runner is registered (``_start``). An abort that
# arrives meanwhile is kept in ``_aborted_early`` (the reply it is for: the lease's
# message id) and stops that turn as it starts: it was dropped, the turn ran to its end,
# and the abort answered that it had stopped it (QA, twice: a stop right after a prompt
# or an approval, on this process or another).
_starting: dict[str, int] = {}
_aborted_early: dict[str, str] = {}


@contextlib.contextmanager
def starting(session_id: str) -> Iterator[None]:
    """While a turn of the session is being started on this loop (its lease taken, its
    prompt or answers logged), up to its runner's registration: an abort arriving
    meanwhile stops it as it starts. One that starts nothing leaves no trace."""
    _starting[session_id] = _starting.get(session_id, 0) + 1
    try:
        yield
    finally:
        left = _starting.pop(session_id) - 1
        if left:
            _starting[session_id] = left
        else:
            _aborted_early.pop(session_id, None)


# Every task the runtime started (turns, titles, listeners' cleanup), until it ends.
_background: set[asyncio.Task[Any]] = set()


def _track(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


def _spawn(coro: Any, *, tenant_id: int, name: str | None = None) -> asyncio.Task[Any]:
    # A fresh context: the task must not inherit a request's thread-sensitive executor.
    # It sees its session's tenant only (row-level security, accounts.tenancy).
    context = contextvars.Context()
    context.run(tenancy.activate, [tenant_id])
    tracing.carry_into(context)  # the trace only: a subtask's turn links to its tool call
    return _track(asyncio.get_running_loop().create_task(coro, name=name, context=context))


async def settle(timeout: float = 10.0) -> None:
    """Wait until the turns and background work this event loop runs have ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # A task may start another as it ends (a turn its title, its listener's cleanup).
    while pending := {t for t in _background if t.get_loop() is loop and not t.done()}:
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.wait(pending, timeout=left)


def _abort_arrived(message: dict[str, Any]) -> bool:
    """An abort for a session whose turn runs here, on this loop: stop it. Never ends
    the inbox (it returns False for every message)."""
    if message.get("type") != "forge.abort":
        return False
    session_id = str(message.get("session_id"))
    # The reply it is for (the lease's, when it was sent): an abort of a turn that has
    # ended since never stops the session's next one.
    reply = str(message.get("message_id") or "")
    runner = _runners.get(session_id)
    if (runner is None or runner.task.done()) and session_id in _starting:
        _aborted_early[session_id] = reply  # its runner stops it as it starts (``_start``)
        return False
    if runner is None or runner.task.done() or reply not in ("", runner.turn.message_id):
        return False
    if runner.task.get_loop() is asyncio.get_running_loop():  # another loop has its own inbox
        _stop(runner)
    return False


def _stop(runner: Any) -> None:
    """Abort a turn running on this loop: once. A second cancel of a task already
    ending its abort broke it out of the ending (two aborts at once, through the
    layer, left the reply open for good with its lease released). A turn whose task
    has not begun to run is not cancelled (a task cancelled then never runs its code,
    and its reply stayed open): it sees ``abort`` as its steps begin and ends aborted.
    Nor is a turn already told to stop (``abort`` set: its cancel may have been taken
    back, ``_run``), whose ending a second cancel would break (a review finding)."""
    told = runner.turn.abort.is_set()
    runner.turn.stopped_by_user = True
    runner.turn.abort.set()
    if runner.turn.running and not told and not runner.task.cancelling():
        runner.task.cancel()


# --- starting ---------------------------------------------------------------------


async def start_turn(
    *,
    session: Session,
    text: Any,
    agent: Any = None,
    files: Sequence[Attachment] = (),
    depth: int = 0,
    speaker: AbstractBaseUser | None = None,
) -> StartedTurn:
    """Log the prompt and start the reply as a task of the running event loop.

    The one entry of every face (the socket directly, HTTP through ``sync.prompt``).
    ``text`` and ``agent`` are taken as received: the prompt is validated here.
    ``speaker`` is the user who sent it: every face passes its caller, since the
    turn's memory is theirs (CONTRACT §2); None (code that acts for the owner, such
    as tests and commands) means the session's owner.
    Raises ``InvalidPrompt`` / ``PromptTooLarge`` / ``UnknownAgent`` for bad input
    (nothing written) and ``SessionBusy`` while another turn of the session runs.
    """
    try:
        return await _begin(
            session, lambda: db(begin_turn)(session, text, agent, files, depth, speaker)
        )
    except McpServersStarting as unlisted:  # (nothing written, no lease taken)
        listing = await list_mcp_tools(unlisted.servers)
    return await _begin(
        session,
        lambda: db(begin_turn)(session, text, agent, files, depth, speaker, mcp_listing=listing),
    )


async def _begin(
    session: Session, begin: Callable[[], Awaitable[tuple[Turn, dict[str, Any]]]]
) -> StartedTurn:
    """``begin()`` (the transaction of a prompt or a regeneration), then its turn's
    runner, as one: a caller cancelled meanwhile (a closed socket, a server stopping)
    does not stop the transaction, which goes on in the database's thread and may
    commit (the prompt logged, the reply opened, the lease taken); the turn is started
    all the same, then the cancel is honoured. It left no runner: the session busy and
    the reply open until the lease expired and the janitor ended it (review)."""

    async def begin_and_start() -> StartedTurn:
        with starting(session.pk):
            turn, user_message = await begin()
            return _start(turn, user_message)

    return await finish_then_cancel(begin_and_start())


async def list_mcp_tools(servers: Mapping[str, Any]) -> mcp.Listing:
    """An agent's MCP tools, its servers started on the MCP loop and awaited here, not on
    the runtime's database thread (``prompting.McpServersStarting``), nor on a thread
    of the loop's small default pool that sync tools share. A listing past its own
    deadline (the start timeout, and some) leaves every server out, said in the notice."""
    try:
        return await mcp.alist_tools(servers)
    except TimeoutError:
        return mcp.Listing(failures={str(name): "did not answer in time" for name in servers})


async def start_regeneration(
    *, session: Session, message_id: Any = None, speaker: AbstractBaseUser | None = None
) -> StartedTurn:
    """Answer the last reply's prompt again, as a new reply (``regenerate.begin_regeneration``),
    run like any turn. ``message_id``, when given, must name the last reply or its
    prompt; ``speaker`` is the user asking (as for :func:`start_turn`). Raises
    ``NothingToRegenerate`` / ``NotLastReply`` / ``SessionBusy`` before anything is
    written."""
    try:
        return await _begin(session, lambda: db(begin_regeneration)(session, message_id, speaker))
    except McpServersStarting as unlisted:  # (nothing written, no lease taken)
        listing = await list_mcp_tools(unlisted.servers)
    return await _begin(
        session,
        lambda: db(begin_regeneration)(session, message_id, speaker, mcp_listing=listing),
    )


def _start(
    turn: Turn, user_message: dict[str, Any], resume: list[Resume] | None = None
) -> StartedTurn:
    session = turn.session
    turn.run_subtask = subtask_runner(turn, start_turn, stop_started)
    # Taken a moment ago, by the prompt's (or the answers') transaction: counted from
    # before that transaction, which may have taken long on a loaded database.
    asked_at = turn.lease_asked_at if turn.lease_asked_at is not None else turn.started_at
    heartbeat.confirmed(turn, asked_at)
    task = _spawn(_run(turn, resume), tenant_id=session.tenant_id, name=f"forge-turn-{session.pk}")
    _runners[session.pk] = runner = _Runner(turn=turn, task=task)
    if _aborted_early.pop(session.pk, None) in ("", turn.message_id):  # came as it started
        _stop(runner)
    return StartedTurn(
        session_id=session.pk,
        message=user_message,
        assistant_message_id=turn.message_id,
        task=task,
    )


def stop_started(started: StartedTurn) -> None:
    """Stop a turn :func:`start_turn` started on this loop, whether or not its task has
    begun to run (``_stop``): a subtask whose parent was stopped as it started."""
    runner = _runners.get(started.session_id)
    if runner is not None and runner.task is started.task:
        _stop(runner)


def start_resumed(turn: Turn, resume: list[Resume]) -> asyncio.Task[None]:
    """Go on with a suspended turn from its answered calls, logged together (the caller
    took the lease, in the transaction that logged them: ``forge.runtime.approvals``)."""
    return _start(turn, {}, resume).task


async def _run(turn: Turn, resume: list[Resume] | None = None) -> None:
    session_id = turn.session.pk
    me = asyncio.current_task()
    assert me is not None
    renewing: asyncio.Task[None] | None = None
    turn.running = True
    try:
        renewing = asyncio.create_task(heartbeat.run(turn, me))
        try:
            await inbox.join(session_id, _abort_arrived)
        except asyncio.CancelledError:
            if not turn.abort.is_set():
                raise
            me.uncancel()  # an abort or a shutdown: its steps end the reply as aborted
        await run_turn(turn, resume)
    finally:
        # The turn has ended (completed, failed, aborted or suspended): an abort from now
        # on is not to cancel this cleanup, which gives the lease back (a cancelled one
        # left the runner registered and the lease held until it expired: review).
        # ``abort_turn`` sees a reply left open, waiting, and ends it.
        turn.running = False
        if renewing is not None:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
        if _runners.get(session_id) and _runners[session_id].turn is turn:
            del _runners[session_id]  # (else the session's next turn already runs here)
        if turn.lease_lost:
            pass  # not ours to give back or announce: it expires (``_lose``)
        elif not turn.lease_released:
            await asyncio.shield(
                db(lease.release)(session_id=session_id, tenant_id=turn.session.tenant_id)
            )
            await services.apublish_status(session_id=session_id, status="idle")
        # Else the reply's completion gave the lease back and announced ``idle``
        # (``dialogue.complete_reply``): the session may be its next turn's already.
    if turn.depth == 0 and not turn.session.title:
        _spawn(title_later(turn.session), tenant_id=turn.session.tenant_id)


# --- compacting on demand ------------------------------------------------------------


async def start_compaction(
    *, session: Session, requester_id: int | None = None
) -> asyncio.Task[dict[str, Any]]:
    """Check, take the session's lease, and start compacting it as a task of the running
    loop (the manual entry: the ``compact/`` route and ``compact_session``).

    Raises ``NothingToCompact`` (an empty session, no progress since the last
    boundary) and ``SessionBusy`` before anything is written. The task's result
    is the boundary's marker; a failed summary writes nothing and is published
    as an error frame. ``requester_id``: the member asking, who must be within budget
    as the owner must (``prepare_manual``).
    """
    await db(prepare_manual)(session, requester_id)
    task: asyncio.Task[dict[str, Any]] = _spawn(
        run_manual(session), tenant_id=session.tenant_id, name=f"forge-compact-{session.pk}"
    )

    def retrieved(done: asyncio.Task[dict[str, Any]]) -> None:
        if not done.cancelled() and done.exception() is not None:
            logger.warning("compacting session %s failed: %s", session.pk, done.exception())

    task.add_done_callback(retrieved)
    return task


# --- asking and aborting ----------------------------------------------------------


async def stop_turns(*, grace: float, timeout: float = 10.0) -> int:
    """End the turns this event loop runs, for a process that is stopping: wait up to
    ``grace`` seconds for them to finish (turns started meanwhile included), then stop
    the rest, each finalized as an abort is (what streamed kept, its tools interrupted,
    its lease given back); calls awaiting approval are left waiting, as recovery leaves
    them. Returns how many were stopped. Waits at most ``timeout`` for their ends."""
    loop = asyncio.get_running_loop()

    def running() -> list[_Runner]:
        return [r for r in _runners.values() if not r.task.done() and r.task.get_loop() is loop]

    deadline = loop.time() + max(0.0, grace)
    while (runners := running()) and (left := deadline - loop.time()) > 0:
        await asyncio.wait({r.task for r in runners}, timeout=left)
    runners = running()
    for runner in runners:
        told = runner.turn.abort.is_set()
        runner.turn.stopped_by_shutdown = True
        runner.turn.abort.set()  # (seen as its steps begin, if its task has not run: ``_stop``)
        if runner.turn.running and not told and not runner.task.cancelling():
            runner.task.cancel()
    if runners:
        await asyncio.wait({r.task for r in runners}, timeout=timeout)
    return len(runners)


async def _stop_here(runner: _Runner, timeout: float) -> None:
    """Stop a turn this process runs and wait (up to ``timeout``) for its end."""
    home = runner.task.get_loop()
    if home is asyncio.get_running_loop():
        _stop(runner)
        await asyncio.wait({runner.task}, timeout=timeout)
        return
    # A turn of another loop of this process (one going on after an expired approval:
    # ``approvals.services.continuations``): stopped in its own loop's thread, and its
    # end watched from here (a task is no other loop's to await).
    home.call_soon_threadsafe(_stop, runner)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not runner.task.done() and loop.time() < deadline:
        await asyncio.sleep(0.02)


def running_turn(session_id: str) -> asyncio.Task[None] | None:
    """The task of the session's turn, if this process runs one."""
    runner = _runners.get(session_id)
    return runner.task if runner else None


async def abort_turn(*, session: Session, timeout: float = 10.0) -> None:
    """Stop the session's turn, in this process or another, and return once its reply
    is finalized as aborted. Every way a reply can be open ends here:

    * a turn this process runs is stopped (its calls awaiting approval are denied:
      ``endings.end_aborted``);
    * no live runner (``recovery.abort_unheld``): a reply that only waits for approval
      has its calls denied and completes as aborted; a dead runner's expired lease is
      taken over and its turn finalized;
    * a runner in another process is sent the abort (its abort inbox), and this waits
      for its lease to go. When it does not answer and its heartbeat is overdue
      (``lease.judged_dead``: a whole renewal missed), it is dead: the session is
      taken over and its turn finalized (``recovery.abort_dead_holder``), without
      waiting for the lease to expire.

    A runner that may be alive is never finalized: when ``timeout`` passes before it
    stops or is judged dead, this raises ``StillRunning`` (409 ``still_running``, the
    session stays ``busy``; ``retry_after``: when it would be judged dead). Raises
    ``NotRunning`` when nothing is open.

    A turn that suspends for approval as the abort reaches it ends with its reply open,
    waiting, and its lease given back (its runner saw the abort too late, or never: the
    inbox drops an abort for a turn that has ended): the abort goes on with that reply
    as one no runner holds. It had answered that it stopped the reply, which stayed
    open (review)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    reply = await _abort_once(session, timeout)
    # Checked whatever the time: past the deadline, a reply left open by a runner that has
    # ended is still ended (quickly: no runner to wait for), one whose runner goes on is
    # ``StillRunning``; an abort never answers success with its reply open (review).
    while reply is not None and await db(reply_open)(session, reply):
        runner = _runners.get(session.pk)
        left = deadline - loop.time()
        if (
            left <= 0
            and runner is not None
            and not runner.task.done()
            and runner.turn.message_id == reply
        ):
            raise StillRunning("this turn was told to stop and has not ended yet", retry_after=1)
        try:
            reply = await _abort_once(session, max(0.0, left), only=reply)
        except NotRunning:
            return  # completed meanwhile (the race's other side)


async def _abort_once(session: Session, timeout: float, only: str | None = None) -> str | None:
    """:func:`abort_turn` once: the reply whose runner was stopped (or seen to end), or
    None when this finalized it. Raises ``NotRunning`` when nothing was open.

    ``only``: the reply a first pass stopped, found open since: nothing but it is
    stopped. Another reply's turn runs when a prompt (or an answer's resumed turn)
    ended it meanwhile, and an abort never stops the session's next turn."""
    runner = _runners.get(session.pk)
    if runner is not None and not runner.task.done():
        if only is not None and runner.turn.message_id != only:
            return None
        await _stop_here(runner, timeout)
        return runner.turn.message_id
    held = await db(abort_unheld)(session, only=only)
    if held is None or (only is not None and held.message_id != only):
        return None
    runner = _runners.get(session.pk)
    if held.owner == lease.OWNER and runner is not None and not runner.task.done():
        if runner.turn.message_id == held.message_id:  # registered meanwhile
            await _stop_here(runner, timeout)
            return held.message_id
    elif held.owner == lease.OWNER and session.pk in _starting:
        # Its turn is starting here, its runner not registered yet: stopped as it starts
        # (the inbox may not be joined yet, or at all on the in-memory layer).
        _aborted_early[session.pk] = held.message_id
    else:
        layer = get_channel_layer()
        if layer is not None:  # to the inbox of the process that holds the lease
            await layer.group_send(
                inbox.runner_group(held.owner),
                {"type": "forge.abort", "session_id": session.pk, "message_id": held.message_id},
            )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        await asyncio.sleep(0.05)
        current = await db(lease.current)(session_id=session.pk)
        if current is None or (current.owner, current.acquired_at) != (
            held.owner,
            held.acquired_at,
        ):
            return held.message_id  # its runner ended (the session may run another since)
        if lease.judged_dead(current):
            if await db(abort_dead_holder)(session, current):
                return None
            continue  # it renewed meanwhile: alive
        if loop.time() > deadline:
            wait = (lease.overdue_at(current) - timezone.now()).total_seconds()
            raise StillRunning(
                "the process running this turn has not stopped yet; its reply is left "
                "alone while that process may be alive",
                retry_after=max(1, math.ceil(wait)),
            )
