"""This process's abort inbox: how an abort sent from another process reaches a turn
this process runs.

One group membership per process and event loop (the group named after the lease's
owner, ``lease.OWNER``), joined by the first turn that runs there and kept, not a
group joined and left by every turn (two Redis round trips and a task per turn, on
the path to its first delta). ``runner.abort_turn`` reads the owner from the
session's lease and sends there; the runner's handler stops the session's turn if
this process runs it. A process-local layer (the in-memory one: every abort comes
from this process, which finds its turn among its runners) needs none.

When the layer cannot be reached, turns run anyway and the inbox is joined in the
background (:func:`join`).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

from . import lease
from .receiver import JOIN_ATTEMPTS, Receiver

logger = logging.getLogger(__name__)

# What the inbox does with a message (the runner's: stop the named session's turn if
# it runs on this loop). It never ends the inbox: it returns False for every message.
Handler = Callable[[dict[str, Any]], bool]


def runner_group(owner: str) -> str:
    """The abort inbox's group of the process whose lease owner is ``owner`` (a group
    name is at most 100 of ``[A-Za-z0-9._-]``; an owner holds a host name and ``:``)."""
    return "forge.runner." + hashlib.blake2b(owner.encode(), digest_size=12).hexdigest()


@dataclass
class _Inbox:
    receiver: Receiver | None
    joined_at: float
    lock: asyncio.Lock
    # Joining again in the background after a join failed (``_join_later``): turns
    # started meanwhile run without waiting on the layer.
    rejoining: asyncio.Task[None] | None = None


# This process's abort inbox on each event loop that runs turns (channel layers are
# per loop); entries of closed loops are dropped as new loops come.
_inboxes: dict[asyncio.AbstractEventLoop, _Inbox] = {}
# The core Redis layer forgets a membership after its ``group_expiry`` (a day by
# default): the inbox joins again when its membership is older than this.
INBOX_REFRESH = 3600.0


async def _open(arrived: Handler, *, attempts: int = JOIN_ATTEMPTS) -> None:
    """Join this process's abort inbox on the running loop, unless it is open (and
    its membership fresh); ``arrived`` takes its messages. Raises what the layer
    raises when it cannot be joined."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return
    loop = asyncio.get_running_loop()
    inbox = _inboxes.get(loop)
    if inbox is not None and _fresh(inbox, loop):
        return
    if inbox is None:
        for dead in [other for other in _inboxes if other.is_closed()]:
            del _inboxes[dead]
        inbox = _inboxes[loop] = _Inbox(receiver=None, joined_at=0.0, lock=asyncio.Lock())
    async with inbox.lock:
        if _fresh(inbox, loop):
            return  # another turn opened it meanwhile
        receiver = inbox.receiver
        if receiver is not None and receiver.receiving:
            await layer.group_add(receiver.group, receiver.channel)  # refreshed
        else:
            inbox.receiver = await Receiver.join(
                runner_group(lease.OWNER),
                arrived,
                name="this process's abort inbox",
                attempts=attempts,
            )
        inbox.joined_at = loop.time()


async def join(session_id: str, arrived: Handler) -> None:
    """Join this process's abort inbox before a turn runs; when the layer cannot be
    reached, the turn runs anyway and the inbox is joined in the background
    (:func:`_join_later`).

    Before, the turn failed at once ("could not reach its channel layer") on a process
    that had not joined yet, while a process that had ran its prompts: what a prompt
    got during a Redis outage depended on which process took it (QA, LOW). The log is
    the turn's truth and streams catch up once the layer is back; only an abort sent
    from another process cannot reach the turn until the inbox is joined (that
    process answers 503 ``abort_unavailable`` or 409 ``still_running`` meanwhile)."""
    inbox = _inboxes.get(asyncio.get_running_loop())
    if inbox is not None and inbox.rejoining is not None and not inbox.rejoining.done():
        return  # being joined in the background: the turn does not wait on the layer
    try:
        await _open(arrived)
    except Exception as exc:
        inbox = _inboxes[asyncio.get_running_loop()]
        logger.warning(
            "session %s: could not join this process's abort inbox (%r); turns run, "
            "and joining is tried again in the background",
            session_id,
            exc,
        )
        inbox.rejoining = asyncio.get_running_loop().create_task(
            _join_later(arrived), name="forge-abort-inbox", context=contextvars.Context()
        )


async def _join_later(arrived: Handler) -> None:
    """Try to join this process's abort inbox every renewal interval, once each time,
    until it is joined (turns of the loop then are abortable from anywhere again)."""
    while True:
        await asyncio.sleep(lease.renewal_interval())
        try:
            await _open(arrived, attempts=1)
        except Exception as exc:
            logger.debug("joining this process's abort inbox failed again: %r", exc)
            continue
        logger.info("this process's abort inbox is joined again")
        return


def _fresh(inbox: _Inbox, loop: asyncio.AbstractEventLoop) -> bool:
    receiver = inbox.receiver
    return (
        receiver is not None
        and receiver.receiving
        and loop.time() - inbox.joined_at < INBOX_REFRESH
    )
