"""channels-redis's pub/sub channel layer, without the idle poll of its reader.

Each shard connection of ``channels_redis.pubsub`` (4.x) has one reader task per
event loop. While the shard has no subscription, that reader sleeps 0.1 s and looks
again; so the first frames a process receives after subscribing on an idle shard
(a new SSE or AI SDK stream in a process that had no other stream open, the usual
case between one user's requests) waited up to 100 ms in the socket: measured as
60-100 ms between a reply's end in the log and its ``finish`` chunk on
``/api/chat`` (``bench/server_path.py``, issue 20).

Here an idle reader waits on an event that :meth:`Shard.subscribe` sets, so it
reads as soon as there is something to read. Everything else is channels-redis's
own: the same Redis commands, serialization, sharding and clean-up (the bus's
pipelined publish, ``sessions.bus._pipelined``, relies on those internals too).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels_redis import pubsub
from channels_redis.utils import _wrap_close

logger = logging.getLogger(__name__)


class Shard(pubsub.RedisSingleShardConnection):
    """One Redis shard's connection, whose idle reader waits for a subscription."""

    def __init__(self, host: Any, channel_layer: Any) -> None:
        super().__init__(host, channel_layer)
        self._subscribed = asyncio.Event()

    async def subscribe(self, channel: str) -> None:
        await super().subscribe(channel)
        self._subscribed.set()

    def _is_subscribed(self) -> bool:
        return bool(self._pubsub is not None and self._pubsub.subscribed)

    async def _do_receiving(self) -> None:
        while True:
            try:
                if self._is_subscribed():
                    message = await self._pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=0.1
                    )
                    self._receive_message(message)
                else:
                    # No await between the check and the wait: a subscribe that lands
                    # after the check sets the event after this clear.
                    self._subscribed.clear()
                    await self._subscribed.wait()
            except (asyncio.CancelledError, TimeoutError, GeneratorExit):
                raise
            except BaseException:
                logger.exception("Unexpected exception in receive task")
                await asyncio.sleep(1)


class LoopLayer(pubsub.RedisPubSubLoopLayer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        hosts: list[Any] = [shard.host for shard in self._shards]
        self._shards: list[Shard] = [Shard(host, self) for host in hosts]


class PubSubChannelLayer(pubsub.RedisPubSubChannelLayer):
    """``channels_redis.pubsub.RedisPubSubChannelLayer`` with :class:`Shard` connections
    (``CHANNEL_LAYERS`` ``BACKEND``: ``forge.pubsub.PubSubChannelLayer``)."""

    def _get_layer(self) -> LoopLayer:
        loop = asyncio.get_running_loop()
        layer: LoopLayer | None = self._layers.get(loop)
        if layer is None:
            layer = LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            self._layers[loop] = layer
            _wrap_close(self, loop)
        return layer
