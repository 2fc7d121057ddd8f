"""Turns a dead runner left open, finalized: one function for start-up, the janitor
and ``manage.py recover_sessions``.

A runner that dies (``kill -9``, a lost machine) leaves its session's lease to
expire and its reply open. :func:`recover_sessions` finalizes every such turn
whose lease has expired: open text keeps what had streamed when the in-flight
mirror (Redis) has it, running tools end as interrupted, the reply gets a
``MessageAbortedError``. A session whose lease is live is left alone: another
process runs it.

Each serving process runs a janitor (:func:`ensure_janitor`) that calls it
every lease period, so a reply never stays open waiting for the next prompt or
the next restart.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sessions.models import Message, Session

from . import lease
from .db import db
from .finalize import INTERRUPTED, finalize_open_messages
from .inflight import mirror

logger = logging.getLogger(__name__)

_janitors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary()
)


def recover_session(session: Session) -> list[str]:
    """Finalize the turn a dead runner left open in this session (if its lease expired).

    Returns the ids of the messages it finalized. Open parts keep the text that
    had streamed when the Redis mirror has it.
    """
    with transaction.atomic():
        current = lease.current(session_id=session.pk)
        if current is not None and current.expires_at > timezone.now():
            return []  # a live runner holds it
        shared = mirror()
        texts = shared.texts_sync(session.pk) if shared is not None else {}
        finished = finalize_open_messages(session=session, reason=INTERRUPTED, texts=texts)
        if current is not None:
            current.delete()
    return finished


def recover_sessions(
    *, session_id: str | None = None, open_replies: bool = True
) -> dict[str, list[str]]:
    """Finalize every turn left open by a process that died: ``{session: [message ids]}``.

    Looks at sessions whose lease expired and, with ``open_replies`` (start-up
    and the command), at every session with an unfinished reply; the janitor,
    which runs every lease period, looks at expired leases only.
    """
    candidates = set(lease.expired_sessions())
    if open_replies:
        candidates |= set(
            Message.objects.filter(role="assistant", data__completed_at=None).values_list(
                "session_id", flat=True
            )
        )
    if session_id is not None:
        candidates &= {session_id}
    recovered: dict[str, list[str]] = {}
    for session in Session.objects.filter(pk__in=candidates).select_related("tenant"):
        finished = recover_session(session)
        if finished:
            recovered[session.pk] = finished
    return recovered


async def _watch(interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            recovered = await db(recover_sessions)(open_replies=False)
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
    task = _janitors.get(loop)
    if task is None or task.done():
        task = loop.create_task(
            _watch(interval or lease.lease_seconds()),
            name="forge-lease-janitor",
            context=contextvars.Context(),
        )
        _janitors[loop] = task
    return task
