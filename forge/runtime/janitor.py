"""Each serving process watches for leases that expired (their runner died) and
finalizes the turns they left open, so a reply never stays open waiting for the
next prompt or the next restart. Started by the first turn a process runs (and by
anything else that calls :func:`ensure_janitor` from its event loop)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref

from django.conf import settings

from sessions.models import Session

from . import lease
from .db import db

logger = logging.getLogger(__name__)

_running: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary()
)


def recover_expired() -> dict[str, list[str]]:
    """Finalize the turns of every session whose lease expired; ``{session: [message ids]}``."""
    from .turns import recover_session

    recovered = {}
    for session in Session.objects.filter(pk__in=lease.expired_sessions()).select_related("tenant"):
        finished = recover_session(session)
        if finished:
            recovered[session.pk] = finished
    return recovered


async def _watch(interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            recovered = await db(recover_expired)()
        except Exception:
            logger.exception("the lease janitor failed; trying again later")
            continue
        for session_id, message_ids in recovered.items():
            logger.warning("finalized %s of session %s (its runner died)", message_ids, session_id)


def ensure_janitor(interval: float | None = None) -> asyncio.Task[None] | None:
    """Start this event loop's janitor once (if ``FORGE_LEASE_JANITOR`` is on)."""
    if not settings.FORGE_LEASE_JANITOR:
        return None
    loop = asyncio.get_running_loop()
    task = _running.get(loop)
    if task is None or task.done():
        task = loop.create_task(
            _watch(interval or lease.lease_seconds()),
            name="forge-lease-janitor",
            context=contextvars.Context(),
        )
        _running[loop] = task
    return task
