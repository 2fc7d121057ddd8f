"""Step 2 of a rolling: the core's window as it is and what a rolling would do.

:func:`take_snapshot` opens no transaction and takes no lock. The increment is the
window's messages with ``seq`` in ``[rolled_seq, cutoff)``; an empty one is ``not_due``,
except an idle rolling of a window that holds only messages rolled before the invariant
(it trims them and renews the session).

The cutoff (:func:`turn_cutoff`) is ``next_seq`` when idle. Otherwise it is
``next_seq - keep``, moved down to a turn's start: the messages a session keeps
verbatim begin with the user message of their turn, never with its reply. So the
model, which sees the ``dialog_history`` block in place of the rolled turns, always
gets a history that starts with a user message (an odd ``keep`` used to cut between
a prompt and its reply: the request then started with an assistant message, which
some servers refuse), and a slice never holds a question without its answer. A
session keeps ``keep`` messages or a few more, never fewer. The cutoff is never
below ``rolled_seq``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import connection

from .. import sql
from ..normalize import Msg
from ..results import Trigger
from .options import RollingOptions, due
from .outcome import RollOutcome


@dataclass(frozen=True)
class Snapshot:
    core_id: str
    tenant_id: int
    user_id: int
    agent: str
    memory_session_id: str
    rolled_seq: int
    next_seq: int
    window_count: int
    trigger: Trigger
    increment: list[Msg]
    trimmed: int  # how many window messages the commit will remove
    cutoff: int  # the new rolled_seq: the increment is [rolled_seq, cutoff)

    @property
    def window_start(self) -> int:
        """The seq of the window's oldest message (the window is the run of seqs
        ``[next_seq - window_count, next_seq)``)."""
        return self.next_seq - self.window_count


def turn_cutoff(window: Sequence[tuple[int, Msg]], *, cutoff: int, floor: int) -> int:
    """``cutoff`` moved down until no session's first message at or past it is a
    reply whose user message is below it (``window``: ``(seq, message)`` oldest first).

    Each move keeps more messages, which can put another session's first kept
    message earlier, so the moves repeat until none is needed; the cutoff only
    decreases, and never below ``floor`` (``rolled_seq``). A session whose turn
    began before ``floor`` (rolled already) is left as it is.
    """
    while cutoff > floor:
        last_user: dict[str, int] = {}  # session -> seq of its newest user message below
        first_kept: dict[str, Msg] = {}
        for seq, message in window:
            if seq < cutoff:
                if message.role == "user":
                    last_user[message.session_id] = seq
            elif message.session_id not in first_kept:
                first_kept[message.session_id] = message
        lowest = min(
            (
                last_user[session]
                for session, message in first_kept.items()
                if message.role != "user" and session in last_user
            ),
            default=cutoff,
        )
        if lowest >= cutoff:
            break
        cutoff = lowest
    return max(cutoff, floor)


def take_snapshot(
    core_id: str,
    *,
    options: RollingOptions,
    now: datetime,
    force: bool = False,
    core: sql.CoreRow | None = None,
    window: list[tuple[int, Msg]] | None = None,
) -> Snapshot | RollOutcome:
    """The core's window as it is, and what a rolling would do (no transaction, no lock).

    ``core`` is the core's row when the caller read it already, and ``window`` its
    window's messages from ``rolled_seq`` on, with their seq
    (:func:`memory.sql.claim_and_read_window`).
    """
    with connection.cursor() as cursor:
        if core is None:
            core = sql.read_core(cursor, core_id)
        if core is None:
            return RollOutcome(core_id, "missing")
        trigger = due(
            window_count=core.window_count,
            last_interaction_at=core.last_interaction_at,
            options=options,
            now=now,
            force=force,
        )
        if trigger is None:
            return RollOutcome(core_id, "not_due")
        snapshot = Snapshot(
            core_id=core_id,
            tenant_id=core.tenant_id,
            user_id=core.user_id,
            agent=core.agent,
            memory_session_id=core.memory_session_id,
            rolled_seq=core.rolled_seq,
            next_seq=core.window_next_seq,
            window_count=core.window_count,
            trigger=trigger,
            increment=[],
            trimmed=0,
            cutoff=core.rolled_seq,
        )
        if trigger == "idle":
            cutoff = snapshot.next_seq
        else:
            cutoff = max(core.rolled_seq, snapshot.next_seq - options.keep)
            if core.rolled_seq < cutoff < snapshot.next_seq:
                if window is None:
                    window = sql.read_window(cursor, core_id, core.rolled_seq, snapshot.next_seq)
                cutoff = turn_cutoff(window, cutoff=cutoff, floor=core.rolled_seq)
        trimmed = max(0, cutoff - snapshot.window_start)
        # An empty increment is not due; only an idle rolling may trim a window that
        # holds nothing unrolled (kept by a rolling of before the invariant) and renew.
        if cutoff <= snapshot.rolled_seq and not (trigger == "idle" and trimmed):
            return RollOutcome(core_id, "not_due", trigger=trigger)
        if window is None:
            window = sql.read_window(cursor, core_id, core.rolled_seq, cutoff)
        increment = [m for seq, m in window if core.rolled_seq <= seq < cutoff]
    return replace(snapshot, increment=increment, trimmed=trimmed, cutoff=cutoff)
