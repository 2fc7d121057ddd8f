"""A turn in progress: what its steps share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge.tools.base import ToolResult
from sessions.models import Session

from .agents import AgentConfig


@dataclass
class Turn:
    session: Session
    user_message_id: str
    message_id: str  # the assistant message this turn writes
    agent: AgentConfig
    model: str  # provider/model
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    run_subtask: Callable[[str, str, str], Awaitable[ToolResult]] | None = None
    depth: int = 0  # subtask nesting
    supersedes: dict[str, Any] | None = None  # the reply a regenerated turn replaces (its info)
    # Who spoke: the user who sent the prompt (or asked for the regeneration); a
    # subtask's is its parent's. Also logged, as the prompt's and the reply's
    # ``user_id``, which is what finishing the turn and the memory tools read.
    speaker: Any = None
    # This process's monotonic clock: when it began working on the turn, and when the
    # turn's first delta streamed (None until then); for the metrics and the log line.
    started_at: float = field(default_factory=time.monotonic)
    first_delta_at: float | None = None
    # The first step's start (``steps.start_steps``: the last step's usage and the first
    # request, after pruning), when it was read in the prompt's own hop to the database
    # thread; None: the run loop reads it (one more hop).
    first_step: tuple[Any, Any] | None = None
    # The workspace its tools use, once found (``subtask.workspace``).
    workspace: Path | None = None
    # Whether the session's lease was given back with the reply's completion
    # (``dialogue.complete_reply``): then the runner has none to release, and the
    # session may already be another turn's.
    lease_released: bool = False
    # Whether a user's abort stopped the turn (``runner._stop``), not a lost lease or a
    # shutdown: only a user's abort denies the reply's calls awaiting approval.
    stopped_by_user: bool = False
    # Whether the process stopping (SIGTERM, Ctrl-C: ``runner.stop_turns``) stopped it:
    # its reply says so, not "aborted" as if the user had pressed stop.
    stopped_by_shutdown: bool = False
    # Until when (this process's monotonic clock) the lease is surely still this turn's:
    # set by the runner when it starts the turn and at each renewal (``heartbeat.run``),
    # a little before the lease's expiry. Past it, another process may find the lease
    # expired and finalize the reply: the turn must stop, and publish nothing more.
    lease_until: float = float("inf")
    # When (this process's monotonic clock) the statement that took the lease for this
    # turn was sent, or a moment before: the lease's expiry is counted from there
    # (``heartbeat.confirmed``), not from when the turn was built after its transaction
    # committed. None: from ``started_at``.
    lease_asked_at: float | None = None
    # Whether its task has begun to run (``runner._run``): from then on an abort or a
    # shutdown cancels it, and the reply ends as aborted; before, they only set
    # ``abort``, which its steps see as they begin (a task cancelled before it runs
    # never runs its code: the reply stayed open, its lease held).
    running: bool = False
    # Whether the turn stopped because its lease was lost or could not be confirmed in
    # time: then its reply is no longer its own to finalize, publish or give back.
    lease_lost: bool = False
    # Whether a renewal is on its way (``heartbeat.run``): its answer says whether
    # the lease is still the turn's, so the deadline is not judged meanwhile.
    renewing: bool = False
    # That renewal, for :meth:`confirm_lease` to wait on.
    renewal: asyncio.Future[Any] | None = None

    def holds_lease(self) -> bool:
        """Whether the turn may still act as its session's runner (write, publish).

        Past ``lease_until`` with no renewal on its way, it may not (a process frozen
        past its lease, resumed). While a renewal is on its way, its answer decides:
        a renewal slowed by a loaded database thread stopped healthy turns (a loaded
        CI pass, when the renewal was also given a deadline)."""
        if not self.lease_lost and not self.renewing and time.monotonic() >= self.lease_until:
            self.lease_lost = not self.lease_released
        return not self.lease_lost

    async def confirm_lease(self) -> bool:
        """Whether the turn may write, send or mirror now: its lease is surely its own.

        Past ``lease_until`` with a renewal on its way, :meth:`holds_lease` keeps the
        turn going (a slow renewal is no lost lease), but what the turn sends may not
        go out on that hope: another process may have found the lease expired and
        finalized the reply. So this waits for the renewal's answer, which the
        heartbeat judges first (a loop frozen past its lease, resumed, restored its
        in-flight mirror of a finalized reply before that answer came: a loaded CI
        pass). Before the deadline it answers at once."""
        for _ in range(100):  # (bounded: the heartbeat takes an answer in one or two)
            if self.lease_lost or self.lease_released:
                break
            if time.monotonic() < self.lease_until:
                return True
            renewal = self.renewal
            if not self.renewing or renewal is None:
                break
            if not renewal.done():
                await asyncio.wait({renewal})
            await asyncio.sleep(0)  # the heartbeat takes the answer and judges it
        return self.holds_lease() and (self.lease_released or not self.renewing)

    def raise_if_aborted(self) -> None:
        """Stop here once an abort was asked for.

        Every abort sets ``abort`` and cancels the turn's task, but a library the
        turn is awaiting can swallow that cancellation (redis-py can, while it reads
        a reply), and the turn would stream on to its end. Checked at every event
        of the model's stream and before every step, the flag stops it anyway. So
        does a lease this process can no longer count on (``lease_until``), even
        before the heartbeat notices (a process frozen past its lease, resumed).
        """
        if self.abort.is_set() or not self.holds_lease():
            raise asyncio.CancelledError
