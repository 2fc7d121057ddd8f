"""A turn in progress: what its steps share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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

    def raise_if_aborted(self) -> None:
        """Stop here once an abort was asked for.

        Every abort sets ``abort`` and cancels the turn's task, but a library the
        turn is awaiting can swallow that cancellation (redis-py can, while it reads
        a reply), and the turn would stream on to its end. Checked at every event
        of the model's stream and before every step, the flag stops it anyway.
        """
        if self.abort.is_set():
            raise asyncio.CancelledError
