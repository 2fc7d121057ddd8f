"""How a turn ends: a completed reply gives the session's lease back and says ``idle`` in
the transaction that completes it, so the next prompt is taken from that commit on,
and it is not told ``idle`` by the turn before it (``dialogue.complete_reply``); and
how it is stopped from another process: through that process's abort inbox
(``forge.runtime.runner``)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer

from forge.runtime import inbox, lease, runner, start_turn
from forge.runtime.processor import Processor
from tests.live import server_env

from . import turn_process
from .conftest import ahistory
from .test_abort_and_recovery import wait_until
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


@pytest.fixture
def joins(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The groups the channel layer is asked to join from here on."""
    layer = get_channel_layer()
    joined: list[str] = []
    group_add = layer.group_add

    async def recording_add(group: str, channel: str) -> None:
        joined.append(group)
        await group_add(group, channel)

    monkeypatch.setattr(layer, "group_add", recording_add)
    return joined


async def test_a_process_local_layer_joins_no_abort_inbox(session, agents, script, joins):
    """With the in-memory layer, an abort can only come from this process, which finds
    the turn itself: no group is joined for aborts."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("this run's layer is Redis: aborts come from other processes too")
    script([text_reply("an answer")])
    started = await start_turn(session=session, text="go")
    await asyncio.wait_for(started.task, timeout=30)
    assert joins == []


async def test_turns_share_one_abort_inbox_per_process(session, agents, script, joins):
    """With Redis, the process joins its abort inbox once (the first turn), not a group
    per turn: later turns cost the layer nothing before they stream."""
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        pytest.skip("the in-memory layer has no abort inbox")
    script([text_reply("one"), text_reply("two"), text_reply("three")])
    for text in ("a", "b", "c"):
        started = await start_turn(session=session, text=text)
        await asyncio.wait_for(started.task, timeout=30)
    assert joins == [inbox.runner_group(lease.OWNER)]  # this test's loop: joined once


@pytest.mark.timeout(120)
async def test_a_turn_in_another_process_is_aborted_through_its_inbox(session, agents, tmp_path):
    """A real process runs the turn (a tool sleeps a minute); ``abort_turn`` here finds
    its owner in the lease and sends to that process's inbox: the turn stops there,
    is finalized as aborted, and gives the lease back, long before the tool's minute."""
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        pytest.skip("the in-memory layer reaches no other process")
    script_path = tmp_path / "script.json"
    script_path.write_text(
        json.dumps(
            [
                [
                    {"type": "tool-input-start", "call_id": "c1", "tool": "sleepy"},
                    {"type": "tool-call", "call_id": "c1", "tool": "sleepy", "input": "{}"},
                    {"type": "finish-step", "finish_reason": "tool-calls"},
                ]
            ]
        )
    )
    env = server_env(FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script_path))
    process = turn_process.popen(session.pk, env)
    try:
        await wait_until(lambda: _tool_status(session) == "running", timeout=60)
        current = await database_sync_to_async(lease.current)(session_id=session.pk)
        assert current is not None
        assert current.owner != lease.OWNER
        began = time.monotonic()
        await runner.abort_turn(session=session, timeout=30)
        assert time.monotonic() - began < 20  # the tool sleeps 60 s
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
    items = await ahistory(session)
    reply = items[-1]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    assert reply["info"]["completed_at"]
    tool = next(p for p in reply["parts"] if p["type"] == "tool")
    assert tool["state"]["status"] == "error"
    assert await database_sync_to_async(lease.current)(session_id=session.pk) is None


def _tool_status(session: Any) -> str | None:
    from sessions.models import Part

    parts = [p.data for p in Part.objects.filter(session=session, type="tool")]
    return parts[0]["state"]["status"] if parts else None
