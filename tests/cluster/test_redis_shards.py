"""``REDIS_URL`` with several URLs: the channel layer shards groups over every Redis
(channels-redis hashes the group name), the cache and the in-flight mirror keep the
first (issue 21, item 1; docs/deploy.md, "Redis shards"). Two real redis-servers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from forge.pubsub import PubSubChannelLayer
from forge.settings.base import caches, channel_layers
from tests.faults.own_redis import OwnRedis


@pytest.fixture
def two_shards() -> Iterator[list[OwnRedis]]:
    shards = [OwnRedis(), OwnRedis()]
    for shard in shards:
        shard.start()
    try:
        yield shards
    finally:
        for shard in shards:
            shard.stop()


async def test_groups_spread_over_every_shard_and_each_gets_its_frames(
    two_shards: list[OwnRedis],
) -> None:
    urls = [shard.url for shard in two_shards]
    config = channel_layers(urls, prefix="shardtest", layer="pubsub")["default"]["CONFIG"]
    assert [host["address"] for host in config["hosts"]] == urls
    assert caches(urls[0])["default"]["LOCATION"] == urls[0]

    layer = PubSubChannelLayer(**config)
    groups = [f"session-{n}" for n in range(16)]
    channels = {}
    try:
        for group in groups:
            channels[group] = await layer.new_channel()
            await layer.group_add(group, channels[group])
        # Each shard holds the subscriptions of some of the groups, none holds all.
        subscribed = [
            len(redis.Redis.from_url(url).pubsub_channels(b"shardtest__group__*")) for url in urls
        ]
        assert sum(subscribed) == len(groups)
        assert all(count > 0 for count in subscribed), subscribed

        for group in groups:
            await layer.group_send(group, {"type": "frame", "group": group})
        for group in groups:
            message = await asyncio.wait_for(layer.receive(channels[group]), 10)
            assert message == {"type": "frame", "group": group}
    finally:
        await layer.flush()
