"""The per-process hub: one subscription per session, fanned out, resilient."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.layers import get_channel_layer

from sessions import bus, hub

pytestmark = pytest.mark.timeout(30)


async def test_two_subscribers_share_one_subscription_and_both_get_every_frame():
    async with hub.subscribe("ses_hub1") as first, hub.subscribe("ses_hub1") as second:
        assert len(hub._hubs) == 1
        for n in range(3):
            await bus.apublish("ses_hub1", {"kind": "status", "n": n})
        await bus.flush()
        for subscriber in (first, second):
            frames: list[Any] = []
            while len(frames) < 3:
                frames += await asyncio.wait_for(subscriber.batch(), 5)
            assert [f["n"] for f in frames] == [0, 1, 2]
    assert hub._hubs == {}


async def test_the_pump_survives_a_failing_receive(monkeypatch):
    layer = get_channel_layer()
    receive = layer.receive
    failures = {"left": 2}

    async def flaky(channel: str) -> Any:
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("redis went away for a moment")
        return await receive(channel)

    monkeypatch.setattr(layer, "receive", flaky)
    monkeypatch.setattr(hub, "RETRY_PAUSE", 0.01)
    async with hub.subscribe("ses_hub2") as subscriber:
        await asyncio.sleep(0.1)
        await bus.apublish("ses_hub2", {"kind": "status", "n": 1})
        await bus.flush()
        frames = await asyncio.wait_for(subscriber.batch(), 5)
    assert frames == [{"kind": "status", "n": 1}]
    assert failures["left"] == 0


def test_merging_keeps_offsets_contiguous_and_never_joins_other_parts():
    frames = [
        {"kind": "delta", "part_id": "a", "offset": 0, "delta": "he"},
        {"kind": "delta", "part_id": "a", "offset": 2, "delta": "llo"},
        {"kind": "delta", "part_id": "b", "offset": 0, "delta": "x"},
        {"kind": "delta", "part_id": "a", "offset": 5, "delta": "!"},
        {"kind": "delta", "part_id": "a", "offset": 9, "delta": "?"},
    ]
    assert hub.merge_deltas(frames) == [
        {"kind": "delta", "part_id": "a", "offset": 0, "delta": "hello"},
        {"kind": "delta", "part_id": "b", "offset": 0, "delta": "x"},
        {"kind": "delta", "part_id": "a", "offset": 5, "delta": "!"},
        {"kind": "delta", "part_id": "a", "offset": 9, "delta": "?"},
    ]
