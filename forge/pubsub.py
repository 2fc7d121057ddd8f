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

And when a shard's subscription connection comes back after a failure (Redis
restarted; redis-py reconnects and subscribes again), every local channel of the
shard's groups is handed :data:`RECONNECTED`: whatever was published meanwhile was
lost, and the receivers (a session's hub: ``forge.realtime.hub``) catch up from the
log. Without it an open stream missed a whole turn that ran during the outage, until
the next turn's events showed the gap (QA).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels_redis import pubsub
from channels_redis.utils import _wrap_close
from redis.asyncio.client import PubSub

logger = logging.getLogger(__name__)

# Handed to every local member of a shard's groups when its subscription reconnected.
RECONNECTED = {"type": "forge.layer_reconnected"}


class _PubSub(PubSub):
    """redis-py's pub/sub, which tells its shard when it connected again. (Its connect
    callback is registered once the first connection is up: it runs on reconnects.)"""

    def __init__(self, *args: Any, shard: Shard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shard = shard

    async def on_connect(self, connection: Any) -> None:
        await super().on_connect(connection)  # subscribed again to every channel
        self.shard._reconnected()


class Shard(pubsub.RedisSingleShardConnection):
    """One Redis shard's connection, whose idle reader waits for a subscription."""

    def __init__(self, host: Any, channel_layer: Any) -> None:
        super().__init__(host, channel_layer)
        self._subscribed = asyncio.Event()

    async def subscribe(self, channel: str) -> None:
        await super().subscribe(channel)
        self._subscribed.set()

    def _ensure_redis(self) -> None:
        created = self._redis is None
        super()._ensure_redis()
        if created:
            redis = self._redis
            self._pubsub = _PubSub(
                redis.connection_pool, event_dispatcher=redis._event_dispatcher, shard=self
            )

    def _reconnected(self) -> None:
        """Hand :data:`RECONNECTED` to every local channel of this shard's groups."""
        layer = self.channel_layer
        data = layer.channel_layer.serialize(RECONNECTED)
        told = 0
        for group, channels in list(layer.groups.items()):
            if group not in self._subscribed_to:
                continue
            for name in list(channels):
                queue = layer.channels.get(name)
                if queue is not None:
                    queue.put_nowait(data)
                    told += 1
        logger.warning("channel layer subscription reconnected; %d receivers told", told)

    def _is_subscribed(self) -> bool:
        return bool(self._pubsub is not None and self._pubsub.subscribed)

    async def _do_receiving(self) -> None:
        failures = 0  # in a row: while Redis is away, every read fails, once a second
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
                if failures:
                    logger.warning(
                        "channel layer subscription reads again, after %d failed reads",
                        failures,
                    )
                    failures = 0
            except (asyncio.CancelledError, TimeoutError, GeneratorExit):
                raise
            except BaseException:
                # The first failure with its traceback, the next ones of the same outage
                # at DEBUG: a traceback a second while Redis was away flooded the log.
                failures += 1
                if failures == 1:
                    logger.exception("channel layer subscription cannot read; retrying")
                else:
                    logger.debug("channel layer subscription still cannot read", exc_info=True)
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
