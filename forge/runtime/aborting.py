"""Aborting a turn when the abort cannot reach the process that runs it.

:func:`~forge.runtime.runner.abort_turn` sends the abort to the inbox of the process
that holds the session's lease, through the channel layer. While the layer (Redis) is
away, that send fails; uncaught, every face answered 500 and the dead-holder check
never ran (QA). :func:`abort_turn` is the entry the faces use: on a failed send it
looks at the lease once more, without the layer:

* the lease is gone: the turn ended meanwhile, the abort has nothing left to do;
* its holder is judged dead (``lease.judged_dead``): the session is taken over and
  its turn finalized as aborted, as when the holder does not answer a delivered abort;
* otherwise the holder may be alive and cannot be told: ``AbortUnavailable`` (503
  ``abort_unavailable`` with ``Retry-After``); the turn is left running.
"""

from __future__ import annotations

import logging
import math

from django.utils import timezone

from forge.db.worker import db
from forge.errors import AbortUnavailable
from sessions.models import Session

from . import lease, runner
from .receiver import being_cancelled
from .recovery import abort_dead_holder

logger = logging.getLogger(__name__)

RETRY_AFTER = 5  # seconds: as a stream refused for the same outage (StreamUnavailable)


def _layer_errors() -> tuple[type[BaseException], ...]:
    import redis

    # OSError: the builtin TimeoutError and a refused connection, raised by some layers.
    return (redis.RedisError, OSError)


async def abort_turn(*, session: Session, timeout: float = 10.0) -> None:
    """:func:`forge.runtime.runner.abort_turn`, which answers ``AbortUnavailable`` instead
    of failing when the abort cannot be sent to the process that runs the turn."""
    try:
        await runner.abort_turn(session=session, timeout=timeout)
    except _layer_errors() as exc:
        if being_cancelled():
            raise
        logger.warning(
            "the abort of session %s could not be sent to the process running it: %r",
            session.pk,
            exc,
        )
        await _undelivered(session)


async def _undelivered(session: Session) -> None:
    current = await db(lease.current)(session_id=session.pk)
    if current is None:
        return  # its runner ended the turn meanwhile
    if lease.judged_dead(current) and await db(abort_dead_holder)(session, current):
        return
    until_dead = (lease.overdue_at(current) - timezone.now()).total_seconds()
    raise AbortUnavailable(
        "the abort could not be sent to the process running this turn (the channel "
        "layer does not answer); the turn goes on; try again shortly",
        retry_after=max(1, min(RETRY_AFTER, math.ceil(until_dead))),
    )
