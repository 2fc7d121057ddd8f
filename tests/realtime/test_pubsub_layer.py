"""``forge.pubsub``: the first frame after subscribing on an idle shard is read at once.

channels-redis's own reader sleeps 0.1 s at a time while its shard has no
subscription, so a message sent right after a new subscription waited up to 100 ms
(uniformly, by where the sleep was). Five rounds of subscribe, send, receive on an
idle layer therefore took about 250 ms in all with it; here they take a few Redis
round trips. The bound below (100 ms for all five) fails the old reader with
near certainty and leaves a loaded machine a wide margin. Real Redis."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from django.conf import settings

from forge.pubsub import PubSubChannelLayer, Shard
from forge.settings.base import channel_layers

pytestmark = pytest.mark.postgres_only  # the server stack: a real Redis


def _layer() -> PubSubChannelLayer:
    prefix = f"pubsubtest-{uuid.uuid4().hex[:8]}"
    config = channel_layers(settings.FORGE_TEST_REDIS_URL, prefix=prefix, layer="pubsub")
    return PubSubChannelLayer(**config["default"]["CONFIG"])


async def test_a_new_subscription_on_an_idle_shard_is_read_without_waiting() -> None:
    layer = _layer()
    try:
        # Start the shard's reader, then leave it idle: no subscription at all.
        channel = await layer.new_channel()
        await layer.group_add("warm", channel)
        await layer.group_discard("warm", channel)
        receiving = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(0.05)
        receiving.cancel()  # unsubscribes the channel: the shard is idle now
        await asyncio.gather(receiving, return_exceptions=True)
        await asyncio.sleep(0.25)  # the old reader would be in its 0.1 s sleeps now

        took = []
        for n in range(5):
            channel = await layer.new_channel()
            await layer.group_add(f"session-{n}", channel)
            started = time.monotonic()
            await layer.group_send(f"session-{n}", {"type": "frame", "n": n})
            message = await asyncio.wait_for(layer.receive(channel), 10)
            took.append(time.monotonic() - started)
            assert message == {"type": "frame", "n": n}
            await layer.group_discard(f"session-{n}", channel)
            receiving = asyncio.ensure_future(layer.receive(channel))
            await asyncio.sleep(0)
            receiving.cancel()
            await asyncio.gather(receiving, return_exceptions=True)
            await asyncio.sleep(0.03)
        assert sum(took) < 0.1, took
    finally:
        await layer.flush()


async def test_the_layer_uses_the_waking_shards() -> None:
    layer = _layer()
    try:
        await layer.new_channel()
        shards = layer._get_layer()._shards
        assert shards
        assert all(isinstance(shard, Shard) for shard in shards)
    finally:
        await layer.flush()
