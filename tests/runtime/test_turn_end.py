"""How a turn ends: a completed reply gives the session's lease back and says ``idle`` in
the transaction that completes it, so the next prompt is taken from that commit on,
and it is not told ``idle`` by the turn before it (``dialogue.complete_reply``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer

from forge.runtime import lease, runner, start_turn
from forge.runtime.processor import Processor

from .conftest import ahistory
from .test_turns import text_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def statuses(frames: list[dict[str, Any]]) -> list[str]:
    return [f["status"] for f in frames if f["kind"] == "status"]


def completion_seq(frames: list[dict[str, Any]], message_id: str) -> int:
    return next(
        f["seq"]
        for f in frames
        if f["kind"] == "event"
        and f["type"] == "message.updated"
        and f["data"]["id"] == message_id
        and f["data"].get("completed_at")
    )


async def test_a_completed_reply_gives_the_lease_back_and_says_idle_once_after_completing(
    session, agents, script, record
):
    script([text_reply("done in a few words")])
    recorder = await record(session)
    started = await start_turn(session=session, text="go")
    await asyncio.wait_for(started.task, timeout=30)
    frames = await recorder.settle()

    assert statuses(frames) == ["busy", "idle"]
    idle = next(i for i, f in enumerate(frames) if f.get("status") == "idle")
    done = completion_seq(frames, started.assistant_message_id)
    assert [f["seq"] for f in frames[idle:] if f["kind"] == "event"] == []  # nothing after
    assert any(f.get("seq") == done for f in frames[:idle])
    assert await database_sync_to_async(lease.current)(session_id=session.pk) is None
    assert runner.running_turn(session.pk) is None


async def test_the_next_prompt_is_taken_once_the_reply_completed_and_is_not_told_idle(
    session, agents, script, record, monkeypatch
):
    """The first turn is held after its completion committed (in its clean-up): the
    session takes the next prompt meanwhile, and the first turn's end neither releases
    the second's lease nor publishes ``idle`` while the second runs."""
    script([text_reply("the first answer"), text_reply("the second answer")])
    recorder = await record(session)
    held, go_on = asyncio.Event(), asyncio.Event()
    forget = Processor.forget

    async def held_forget(self: Processor) -> None:
        if not held.is_set():
            held.set()
            await go_on.wait()
        await forget(self)

    monkeypatch.setattr(Processor, "forget", held_forget)
    first = await start_turn(session=session, text="one")
    await asyncio.wait_for(held.wait(), 30)
    assert first.task.done() is False

    second = await start_turn(session=session, text="two")  # no SessionBusy
    assert runner.running_turn(session.pk) is second.task
    go_on.set()
    await asyncio.wait_for(first.task, timeout=30)
    # The second turn still owns its lease and its place: the first one's end took
    # neither, and said nothing.
    assert runner.running_turn(session.pk) is second.task or second.task.done()
    await asyncio.wait_for(second.task, timeout=30)
    frames = await recorder.settle()

    assert statuses(frames) == ["busy", "idle", "busy", "idle"]
    kinds = [(f["kind"], f.get("status"), f.get("seq")) for f in frames]
    second_busy = [i for i, k in enumerate(kinds) if k[1] == "busy"][1]
    last_idle = [i for i, k in enumerate(kinds) if k[1] == "idle"][1]
    done = completion_seq(frames, second.assistant_message_id)
    assert any(k[2] == done for k in kinds[second_busy:last_idle])
    items = await ahistory(session)
    replies = [i for i in items if i["info"]["role"] == "assistant"]
    assert [r["info"].get("finish") for r in replies] == ["stop", "stop"]
    assert await database_sync_to_async(lease.current)(session_id=session.pk) is None


async def test_a_reply_that_fails_to_complete_leaves_the_lease_to_the_runner(
    session, agents, script, record, monkeypatch
):
    """A completion that raises is rolled back with its release: the runner finalizes the
    reply, gives the lease back and says ``idle`` itself."""
    from forge.runtime import dialogue

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the window append failed")

    monkeypatch.setattr(dialogue, "_complete_and_record", broken)
    script([text_reply("never completed")])
    recorder = await record(session)
    started = await start_turn(session=session, text="go")
    await asyncio.wait_for(started.task, timeout=30)
    frames = await recorder.settle()

    assert statuses(frames) == ["busy", "idle"]
    reply = (await ahistory(session))[-1]
    assert reply["info"]["error"]["name"] == "UnknownError"
    assert await database_sync_to_async(lease.current)(session_id=session.pk) is None


async def test_a_process_local_layer_joins_no_abort_group(session, agents, script, monkeypatch):
    """With the in-memory layer, an abort can only come from this process, which finds
    the turn itself: the turn joins no group for it."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("this run's layer is Redis: aborts come from other processes too")
    groups: list[str] = []
    group_add = layer.group_add

    async def recording_add(group: str, channel: str) -> None:
        groups.append(group)
        await group_add(group, channel)

    monkeypatch.setattr(layer, "group_add", recording_add)
    script([text_reply("an answer")])
    started = await start_turn(session=session, text="go")
    await asyncio.wait_for(started.task, timeout=30)
    assert runner.runner_group(session.pk) not in groups
