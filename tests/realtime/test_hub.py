"""The per-process hub: one subscription per session, fanned out, resilient."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.layers import get_channel_layer

from forge.realtime import hub, receiver
from sessions import bus

pytestmark = pytest.mark.timeout(30)


async def test_two_subscribers_share_one_subscription_and_both_get_every_frame():
    async with hub.subscribe("ses_hub1") as first, hub.subscribe("ses_hub1") as second:
        assert [key for key in hub._hubs if key[1] == "ses_hub1"] == [
            (asyncio.get_running_loop(), "ses_hub1")
        ]
        for n in range(3):
            await bus.apublish("ses_hub1", {"kind": "status", "n": n})
        await bus.flush()
        for subscriber in (first, second):
            frames: list[Any] = []
            while len(frames) < 3:
                frames += await asyncio.wait_for(subscriber.batch(), 5)
            assert [f["n"] for f in frames] == [0, 1, 2]
    assert not [key for key in hub._hubs if key[1] == "ses_hub1"]


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
    monkeypatch.setattr(receiver, "RETRY_PAUSE", 0.01)
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


async def test_a_cancelled_pump_stops_even_when_the_layer_raises_something_else(monkeypatch):
    """channels-redis may raise an ordinary error while a cancelled receive cleans up;
    the pump must stop, not mistake it for a hiccup and receive forever."""
    layer = get_channel_layer()
    started = asyncio.Event()

    async def cleanup_fails_on_cancel(channel: str) -> Any:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("cleaning up the receive failed") from None

    monkeypatch.setattr(layer, "receive", cleanup_fails_on_cancel)
    monkeypatch.setattr(receiver, "RETRY_PAUSE", 0.01)
    async with hub.subscribe("ses_hub3"):
        await asyncio.wait_for(started.wait(), 5)
        pumping = hub._hubs[(asyncio.get_running_loop(), "ses_hub3")].pumping
    assert pumping is not None
    assert pumping.done()  # leaving stopped it


async def test_a_receive_that_swallows_its_cancellation_is_woken_and_stops(monkeypatch):
    """The failure seen with channels-redis: a cancelled receive goes on waiting."""
    layer = get_channel_layer()
    receive = layer.receive
    started = asyncio.Event()

    async def deaf_to_cancel(channel: str) -> Any:
        started.set()
        while True:
            try:
                return await receive(channel)
            except asyncio.CancelledError:
                continue  # as the library did: the cancellation is lost

    monkeypatch.setattr(layer, "receive", deaf_to_cancel)
    async with hub.subscribe("ses_hub4"):
        await asyncio.wait_for(started.wait(), 5)
        pumping = hub._hubs[(asyncio.get_running_loop(), "ses_hub4")].pumping
    assert pumping is not None
    assert pumping.done()  # woken by a message to its own channel, then stopped


async def test_a_failing_join_leaves_no_hub_behind(monkeypatch):
    layer = get_channel_layer()

    async def unreachable(group: str, channel: str) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(layer, "group_add", unreachable)
    with pytest.raises(ConnectionError):
        async with hub.subscribe("ses_hub5"):
            pytest.fail("a subscription that could not join the group was entered")
    assert not [key for key in hub._hubs if key[1] == "ses_hub5"]


async def test_a_failing_leave_still_releases_the_hub(monkeypatch, caplog):
    layer = get_channel_layer()

    async def unreachable(group: str, channel: str) -> None:
        raise ConnectionError("redis is down")

    async with hub.subscribe("ses_hub6"):
        monkeypatch.setattr(layer, "group_discard", unreachable)
    assert not [key for key in hub._hubs if key[1] == "ses_hub6"]
    assert "leaving the group of session ses_hub6 failed" in caplog.text
