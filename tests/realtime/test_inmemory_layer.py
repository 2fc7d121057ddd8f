"""``forge.inmemory``: channels' in-memory layer, its ``group_send`` without a task per
member. What a member sees must not change: its own copy of every frame, in order; a
full member skipped while the others still get the frame; an empty group a no-op."""

from __future__ import annotations

import asyncio

import pytest

from forge.inmemory import InMemoryChannelLayer


async def test_every_member_gets_its_own_copy_in_order() -> None:
    layer = InMemoryChannelLayer()
    first, second = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("session-1", first)
    await layer.group_add("session-1", second)
    frames = [{"type": "frame", "seq": n, "data": {"text": f"t{n}"}} for n in range(5)]
    for frame in frames:
        await layer.group_send("session-1", frame)
    for channel in (first, second):
        got = [await asyncio.wait_for(layer.receive(channel), 1) for _ in frames]
        assert got == frames
        assert all(a is not b for a, b in zip(got, frames, strict=True))  # copies
    with pytest.raises(TimeoutError):  # and nothing more
        await asyncio.wait_for(layer.receive(first), 0.05)


async def test_a_full_member_is_skipped_and_the_others_still_receive() -> None:
    layer = InMemoryChannelLayer(capacity=1)
    full, open_ = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("g", full)
    await layer.group_add("g", open_)
    await layer.send(full, {"type": "filler"})  # ``full`` is at capacity now
    await layer.group_send("g", {"type": "frame", "n": 1})
    assert await layer.receive(open_) == {"type": "frame", "n": 1}
    assert await layer.receive(full) == {"type": "filler"}
    with pytest.raises(TimeoutError):  # the frame was not queued behind the filler
        await asyncio.wait_for(layer.receive(full), 0.05)


async def test_an_empty_or_unknown_group_is_a_no_op() -> None:
    layer = InMemoryChannelLayer()
    await layer.group_send("nobody", {"type": "frame"})
    channel = await layer.new_channel()
    await layer.group_add("left", channel)
    await layer.group_discard("left", channel)
    await layer.group_send("left", {"type": "frame"})
    assert channel not in layer.channels


async def test_a_bad_group_name_is_refused_as_by_channels() -> None:
    layer = InMemoryChannelLayer()
    with pytest.raises(TypeError):
        await layer.group_send("not a valid name!", {"type": "frame"})
