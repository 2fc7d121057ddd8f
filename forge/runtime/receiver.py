"""A channel-layer group membership with its receive loop, that can be left for sure.

The hub (one per session per process) and the process's abort inbox both join a
group and hand what arrives to a callback; this is that loop, once. It lives in the
runtime, the lower of its two users: the runtime never imports a face
(``forge.realtime``), while a face may import the runtime (docs/layers.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

logger = logging.getLogger(__name__)

RETRY_PAUSE = 0.5  # seconds before receiving again after the layer failed
JOIN_ATTEMPTS = 3
# Seconds a cancelled receive has to end before it is woken by a message. Not zero: a
# wake-up that arrives after the receive ended would sit in channels-redis' receive
# buffer for good.
STOP_GRACE = 0.25

WAKE_UP = {"type": "forge.wake_up"}  # sent to a receiver that must notice it should stop


@dataclass
class Receiver:
    """A channel in a channel-layer group, and a task handing what it receives to
    ``handle``, that can be left for sure.

    A Redis hiccup does not end the loop (it logs, pauses ``RETRY_PAUSE`` and
    receives again). Cancelling a channel-layer receive is not always enough to
    stop it: a cancellation that lands while channels-redis and redis-py are
    between a blocking read and the next one can be swallowed, and the receive
    goes on waiting. So stopping also marks the loop as stopping and, if it has
    not ended within ``STOP_GRACE``, sends a message to its own channel, which
    makes the receive return.
    """

    layer: Any
    channel: str
    group: str
    name: str  # what the group is, for the logs
    task: asyncio.Task[None] | None = None
    stopping: bool = False

    @property
    def receiving(self) -> bool:
        """Whether its receive loop still runs (not stopped, not ended)."""
        return self.task is not None and not self.task.done()

    @classmethod
    async def join(
        cls,
        group: str,
        handle: Callable[[dict[str, Any]], bool | None],
        *,
        name: str,
        confirm: bool = False,
        attempts: int = JOIN_ATTEMPTS,
    ) -> Receiver:
        """Join ``group`` on a new channel and receive; ``handle`` returning True ends it.

        Joining is tried ``attempts`` times (``JOIN_ATTEMPTS``): after Redis restarts, the first
        command on each pooled connection fails ("connection closed by server")
        and the next reconnects. Then the last error is raised. All attempts together
        take at most ``FORGE_LAYER_TIMEOUT`` seconds, then ``TimeoutError``: a Redis
        that stopped answering (a network partition) must not keep a caller waiting.

        With ``confirm``, the layer must also deliver a message to the new channel
        (``WAKE_UP``, which the receive loop skips): channels-redis's pub/sub layer
        sends ``SUBSCRIBE`` on a warm connection without waiting for an answer, so
        only a round trip tells that the membership is really open.
        """
        layer = get_channel_layer()
        async with asyncio.timeout(settings.FORGE_LAYER_TIMEOUT):
            for attempt in range(1, attempts + 1):
                try:
                    channel = await layer.new_channel()
                    await layer.group_add(group, channel)
                    if confirm:
                        await layer.send(channel, WAKE_UP)
                    break
                except Exception:
                    if attempt == attempts or being_cancelled():
                        raise
                    logger.warning("joining %s failed (attempt %d); retrying", name, attempt)
                    await asyncio.sleep(RETRY_PAUSE * attempt)
        receiver = cls(layer, channel, group, name)
        receiver.task = asyncio.get_running_loop().create_task(receiver._receive(handle))
        return receiver

    async def _receive(self, handle: Callable[[dict[str, Any]], bool | None]) -> None:
        while not self.stopping:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                if being_cancelled():
                    raise  # the layer turned our cancellation into another error
                logger.exception("receiving on %s failed; retrying", self.name)
                await asyncio.sleep(RETRY_PAUSE)
                continue
            if message == WAKE_UP or self.stopping:
                continue
            if handle(message):
                return

    async def stop(self) -> None:
        self.stopping = True
        if self.task is None or self.task.done():
            return
        self.task.cancel()
        _, pending = await asyncio.wait({self.task}, timeout=STOP_GRACE)
        if pending:
            logger.warning("a receive on %s ignored its cancellation; waking it", self.channel)
            await self.layer.send(self.channel, WAKE_UP)
            await asyncio.wait({self.task}, timeout=10.0)
        if self.task.done() and not self.task.cancelled():
            self.task.exception()  # it ended as asked; whatever it raised on the way is moot

    async def leave(self) -> None:
        """Stop receiving and leave the group, within ``FORGE_LAYER_TIMEOUT``. An unreachable
        or unresponsive layer is logged, not raised: the membership expires with the
        group (channels-redis ``group_expiry``), nothing reads the channel any more, and
        a receive still waiting on a frozen connection ends as soon as it returns."""
        try:
            async with asyncio.timeout(settings.FORGE_LAYER_TIMEOUT):
                await self.stop()
                await self.layer.group_discard(self.group, self.channel)
        except Exception:
            logger.warning("leaving %s failed", self.name, exc_info=True)


def being_cancelled() -> bool:
    """Whether the current task was asked to stop (even if an error surfaced instead of
    ``CancelledError``, as channels-redis can raise while cleaning up a receive)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
