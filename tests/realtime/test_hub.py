"""The per-process hub: one subscription per session, fanned out, resilient."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.layers import get_channel_layer

from forge.errors import StreamUnavailable
from forge.realtime import hub, limits
from forge.realtime.limits import TooManyStreams
from forge.runtime import receiver
from sessions import bus

pytestmark = pytest.mark.timeout(30)


async def test_two_subscribers_share_one_subscription_and_both_get_every_frame():
    async with hub.subscribe("ses_hub1") as first, hub.subscribe("ses_hub1") as second:
        assert hub.subscribed_sessions().count("ses_hub1") == 1
        for n in range(3):
            await bus.apublish("ses_hub1", {"kind": "status", "n": n})
        await bus.flush()
        for subscriber in (first, second):
            frames: list[Any] = []
            while len(frames) < 3:
                frames += await asyncio.wait_for(subscriber.batch(), 5)
            assert [f["n"] for f in frames] == [0, 1, 2]
    assert "ses_hub1" not in hub.subscribed_sessions()


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
        pumping = hub.receiving("ses_hub3")
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
        pumping = hub.receiving("ses_hub4")
    assert pumping is not None
    assert pumping.done()  # woken by a message to its own channel, then stopped


async def test_a_failing_join_leaves_no_hub_behind(monkeypatch):
    layer = get_channel_layer()

    async def unreachable(group: str, channel: str) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(layer, "group_add", unreachable)
    monkeypatch.setattr(receiver, "RETRY_PAUSE", 0.01)
    with pytest.raises(StreamUnavailable):
        async with hub.subscribe("ses_hub5", owner=7):
            pytest.fail("a subscription that could not join the group was entered")
    assert "ses_hub5" not in hub.subscribed_sessions()
    assert limits.open_streams(7) == 0


async def test_a_join_the_layer_never_answers_is_refused_and_holds_nothing(monkeypatch, settings):
    """An unresponsive Redis (a network partition) keeps a join waiting for good."""
    layer = get_channel_layer()
    settings.FORGE_LAYER_TIMEOUT = 0.2

    async def frozen(*args: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(layer, "group_add", frozen)
    with pytest.raises(StreamUnavailable) as refused:
        await hub.join("ses_hub7", owner=7)
    assert (refused.value.status, refused.value.code) == (503, "stream_unavailable")
    assert "ses_hub7" not in hub.subscribed_sessions()
    assert limits.open_streams(7) == 0
    monkeypatch.undo()  # the layer answers again
    async with hub.subscribe("ses_hub7", owner=7):
        assert limits.open_streams(7) == 1


async def test_a_slot_is_held_by_an_open_subscription_only_and_given_back_once(settings):
    settings.FORGE_MAX_STREAMS_PER_USER = 2
    first = await hub.join("ses_hub8", owner=8)
    second = await hub.join("ses_hub8", owner=8)
    assert limits.open_streams(8) == 2
    with pytest.raises(TooManyStreams):
        await hub.join("ses_hub9", owner=8)
    assert "ses_hub9" not in hub.subscribed_sessions()
    await first.close()
    first.close_soon()  # a response's close() after its stream ended
    await first.close()
    assert limits.open_streams(8) == 1
    await second.close()
    assert limits.open_streams(8) == 0
    assert "ses_hub8" not in hub.subscribed_sessions()


async def test_a_subscription_no_response_claims_lets_go_by_itself():
    """A response the server dropped unsent (its client went away on the way out)."""
    subscription = await hub.join("ses_hub10", owner=10, claim_within=0.05)
    while "ses_hub10" in hub.subscribed_sessions():
        await asyncio.sleep(0.01)
    assert limits.open_streams(10) == 0
    assert subscription.claim() is False  # a response starting now ends at once
    claimed = await hub.join("ses_hub10", owner=10, claim_within=0.05)
    assert claimed.claim() is True
    await asyncio.sleep(0.2)
    assert limits.open_streams(10) == 1  # claimed in time: held until closed
    await claimed.close()
    assert limits.open_streams(10) == 0


async def test_a_failing_leave_still_releases_the_hub(monkeypatch, caplog):
    layer = get_channel_layer()

    async def unreachable(group: str, channel: str) -> None:
        raise ConnectionError("redis is down")

    async with hub.subscribe("ses_hub6"):
        monkeypatch.setattr(layer, "group_discard", unreachable)
    assert "ses_hub6" not in hub.subscribed_sessions()
    assert "leaving the group of session ses_hub6 failed" in caplog.text
