"""A running turn's lease, kept: its heartbeat renews it, and a turn that cannot count on
it any more stops (``Turn.lease_lost``).

A turn may act as its session's runner until ``Turn.lease_until`` (this process's
monotonic clock), a little before the lease's expiry: past it, another process may
find the lease expired and finalize the reply. Each renewal moves that deadline,
counted from the expiry the renewal wrote.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any

from django.utils import timezone

from forge.db.worker import db

from . import lease
from .turn import Turn

logger = logging.getLogger(__name__)


def margin() -> float:
    """How long before its lease's expiry a runner stops counting on it: another
    process judges expiry by its own clock, and a stop takes a moment."""
    return min(1.0, lease.lease_seconds() / 10)


def confirmed(turn: Turn, asked_at: float) -> None:
    """The lease was taken or renewed by a statement sent at ``asked_at`` (monotonic)."""
    turn.lease_until = asked_at + lease.lease_seconds() - margin()


def renewed_until(turn: Turn, expires: datetime) -> None:
    """The lease was renewed until ``expires``, the expiry the renewal wrote: counted on
    this process's monotonic clock from what is left of it now. Not from when the
    answer arrived: a loop frozen after the database ran the renewal (the database
    thread is not frozen with it) took the answer for a fresh lease, while another
    process had found it expired and finalized the reply; the turn then restored its
    in-flight mirror (a loaded CI pass). Counted so, such a lease is past at once."""
    left = (expires - timezone.now()).total_seconds()
    turn.lease_until = time.monotonic() + left - margin()


async def run(turn: Turn, task: asyncio.Task[Any]) -> None:
    """Renew the lease while the turn runs; stop the turn if the lease was lost, or if
    it could not be renewed before it would expire (renewals failing: the database
    gone or unreachable). A failed renewal is tried again while the lease lasts: one
    lost connection does not stop a turn."""
    interval = lease.renewal_interval()  # what ``lease.judged_dead`` counts on
    failures = 0
    while True:
        await asyncio.sleep(max(0.0, min(interval, turn.lease_until - time.monotonic())))
        if turn.lease_released:
            return  # given back with the reply's completion: the turn is ending
        if not turn.holds_lease():
            lose(turn, task, f"could not renew its lease ({failures} failed renewals)")
            return
        # No deadline on the renewal itself: one slowed by a loaded database thread is
        # not a lost lease (a loaded CI pass stopped a healthy turn so); its answer is.
        turn.renewing = True
        try:
            turn.renewal = asyncio.ensure_future(
                db(lease.renew)(session_id=turn.session.pk, tenant_id=turn.session.tenant_id)
            )
            renewed = await turn.renewal
        except Exception as exc:
            failures += 1
            logger.warning(
                "session %s: renewing the lease failed (%s); trying again while it lasts",
                turn.session.pk,
                type(exc).__name__,
            )
            continue
        finally:
            turn.renewing = False
        if turn.lease_released:
            return
        if renewed is None:
            lose(turn, task, "lost the lease")
            return
        renewed_until(turn, renewed)
        failures = 0


def lose(turn: Turn, task: asyncio.Task[Any], why: str) -> None:
    """Stop a turn whose lease is not surely its own any more: another process may be
    finalizing its reply, so it writes, publishes and gives back nothing more
    (``Turn.lease_lost``); the lease expires, and whoever finds it so finalizes the
    reply from what streamed (``recovery``)."""
    logger.error("session %s: %s; stopping its turn", turn.session.pk, why)
    turn.lease_lost = True
    turn.abort.set()
    task.cancel()
