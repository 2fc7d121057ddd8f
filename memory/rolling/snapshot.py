"""Step 2 of a rolling: the core's window as it is and what a rolling would do.

:func:`take_snapshot` opens no transaction and takes no lock. The increment is the
window's messages with ``seq`` in ``[rolled_seq, cutoff)``
(:meth:`Snapshot.cutoff`: ``next_seq`` when idle, else ``next_seq - keep``, never below
``rolled_seq``); an empty one is ``not_due``, except an idle rolling of a window that
holds only messages rolled before the invariant (it trims them and renews the session).
"""

from __future__ import annotations

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

    @property
    def window_start(self) -> int:
        """The seq of the window's oldest message (the window is the run of seqs
        ``[next_seq - window_count, next_seq)``)."""
        return self.next_seq - self.window_count

    def cutoff(self, keep: int) -> int:
        """The new ``rolled_seq``: messages with ``seq`` below it are rolled (the
        increment is ``[rolled_seq, cutoff)``) and leave the window. Idle: all of them;
        else all but the ``keep`` newest. Never below ``rolled_seq``."""
        if self.trigger == "idle":
            return self.next_seq
        return max(self.rolled_seq, self.next_seq - keep)


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
        )
        cutoff = snapshot.cutoff(options.keep)
        trimmed = max(0, cutoff - snapshot.window_start)
        # An empty increment is not due; only an idle rolling may trim a window that
        # holds nothing unrolled (kept by a rolling of before the invariant) and renew.
        if cutoff <= snapshot.rolled_seq and not (trigger == "idle" and trimmed):
            return RollOutcome(core_id, "not_due", trigger=trigger)
        if window is None:
            increment = sql.read_window(cursor, core_id, core.rolled_seq, cutoff)
        else:
            increment = [m for seq, m in window if core.rolled_seq <= seq < cutoff]
    return replace(snapshot, increment=increment, trimmed=trimmed)
