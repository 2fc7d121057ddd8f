"""Publishing to a session's channel-layer group.

One group per session. Durable frames (one per log event, ``kind: "event"``)
are published after the transaction that wrote the event commits; ephemeral
frames (``kind: "delta" | "snapshot" | "status"``) go to the bus only.
Channel layers deliver at most once: a subscriber repairs gaps from the log
(``seq``) or from a snapshot (``offset``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

FRAME_MESSAGE_TYPE = "forge.frame"  # handled by a consumer's ``forge_frame`` method


def session_group(session_id: str) -> str:
    return f"forge.session.{session_id}"


def _message(frame: dict[str, Any]) -> dict[str, Any]:
    return {"type": FRAME_MESSAGE_TYPE, "frame": frame}


def _called_for_server_loop() -> bool:
    """True in a worker thread that ``sync_to_async`` runs on behalf of a live event loop.

    There the frame must be sent from that loop (where the consumers of an
    in-memory layer wait), which ``async_to_sync`` does.
    """
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    pid = getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None)
    return loop is not None and pid == os.getpid() and loop.is_running()


class _ThreadLoop:
    """An event loop owned by one thread, for sync callers that no server loop waits for
    (management commands, scripts, plain threads). Closed when its thread ends.

    ``async_to_sync`` would start a thread and a loop per call, and handing frames
    to a shared publisher thread costs a thread wake-up each; a loop of the
    caller's own runs ``group_send`` in place (and keeps channels-redis's
    connection pool, which is per loop, warm).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        if not self.loop.is_closed():
            self.loop.close()


_thread_loops = threading.local()


def _own_loop() -> asyncio.AbstractEventLoop:
    holder: _ThreadLoop | None = getattr(_thread_loops, "holder", None)
    if holder is None or holder.loop.is_closed():
        holder = _thread_loops.holder = _ThreadLoop()
    return holder.loop


def publish(session_id: str, frame: dict[str, Any]) -> None:
    """Send one frame to the session's group, from synchronous code; returns once sent."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = _message(frame)
    group = session_group(session_id)
    if _called_for_server_loop():
        async_to_sync(layer.group_send)(group, message)
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("bus.publish() called from a running event loop: await apublish()")
    _own_loop().run_until_complete(layer.group_send(group, message))


async def apublish(session_id: str, frame: dict[str, Any]) -> None:
    """Send one frame to the session's group, from async code."""
    layer = get_channel_layer()
    if layer is None:
        return
    await layer.group_send(session_group(session_id), _message(frame))


def publish_after_commit(session_id: str, frame: dict[str, Any]) -> None:
    """``transaction.on_commit`` target: a bus failure must not undo a committed write."""
    try:
        publish(session_id, frame)
    except Exception:
        logger.exception("could not publish %s seq %s", frame.get("type"), frame.get("seq"))
