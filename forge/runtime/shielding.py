"""Work that must reach its end even as the task awaiting it is cancelled.

A write runs in a thread that cancellation cannot stop, and a prompt's transaction,
once committed, must have its runner started: finalizing an abort while such work is
still running could interleave with it, and a cancelled start would leave the session
busy until its lease expired. :func:`finish_then_cancel` runs the work as a task of its
own, lets it finish, then honours the cancel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from forge.errors import ForgeError

from .prompting import McpServersStarting

logger = logging.getLogger(__name__)

T = TypeVar("T")


async def finish_then_cancel(work: Awaitable[T]) -> T:
    """Await ``work``, run as a task of its own: a cancel of the caller meanwhile lets it
    finish (a write is written, a turn it starts is started), then is honoured.

    What it raises once the caller has gone is retrieved (even if a second cancel ends
    the wait) and logged, unless it is a refusal (``ForgeError``) or the signal to list
    an agent's MCP tools first: never "exception was never retrieved"."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_gone_callers_result)
        await asyncio.wait({task})
        raise


def _gone_callers_result(task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None and not isinstance(error, ForgeError | McpServersStarting):
        logger.error("work whose caller had gone failed", exc_info=error)
