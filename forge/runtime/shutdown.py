"""A serving process that is asked to stop ends its turns before it exits.

daphne stops on SIGTERM or SIGINT by stopping its Twisted reactor, and with it the
event loop the turns run on. A turn is a task of the runtime, not of a connection:
daphne cancels its connections' application instances, and the turns simply
stopped. Nothing was written: the reply stayed open, the session ``busy`` (a prompt
got ``409 busy``) until its lease expired and a janitor finalized it, and on a stack
without Redis the text that had streamed, which only this process held, was lost.
A restart or a deploy is the most ordinary way to stop a server.

:func:`on_daphne_shutdown` adds a ``before shutdown`` trigger to the reactor: the
shutdown waits until :func:`forge.runtime.runner.stop_turns` has let the running
turns finish (``FORGE_SHUTDOWN_GRACE`` seconds) and ended the rest as aborted (what
streamed kept, the lease given back). Whichever channel started a turn (socket, SSE
or HTTP), it ends the same way.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable
from typing import Any

from django.conf import settings

from .approvals.services import started_continuations
from .runner import stop_turns

logger = logging.getLogger("forge")


async def _stop_turns() -> None:
    """End the turns of the server's loop and, side by side, those going on after an
    expired approval in the process's continuations loop (a thread of its own, which
    a daemon thread's exit would otherwise stop mid-reply, the reply left open)."""
    grace = settings.FORGE_SHUTDOWN_GRACE
    ends: list[Awaitable[int]] = [stop_turns(grace=grace)]
    if (elsewhere := started_continuations()) is not None:
        ends.append(
            asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(stop_turns(grace=grace), elsewhere)
            )
        )
    stopped = 0
    for result in await asyncio.gather(*ends, return_exceptions=True):
        if isinstance(result, BaseException):
            logger.error(
                "ending the running turns at shutdown failed",
                exc_info=(type(result), result, result.__traceback__),
            )
        else:
            stopped += result
    if stopped:
        logger.info("shutting down: %d running turn(s) ended as aborted", stopped)


def on_daphne_shutdown() -> None:
    """Under daphne (its reactor installed before the application is imported), end the
    running turns before the reactor stops. Elsewhere nothing."""
    if "daphne.server" not in sys.modules:
        return
    reactor: Any = sys.modules.get("twisted.internet.reactor")
    loop = getattr(reactor, "_asyncioEventloop", None)
    if loop is None:  # not the asyncio reactor daphne installs
        return
    from twisted.internet.defer import Deferred

    def before_shutdown() -> Any:
        return Deferred.fromFuture(loop.create_task(_stop_turns()))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
