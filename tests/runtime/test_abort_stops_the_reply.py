"""A user's abort ends the reply, whatever state it is in: calls waiting for approval
beside a running one, a reply that only waits, a turn whose process was killed.
And it never finalizes a turn whose runner is alive (docs/approvals.md, "Abort";
docs/durability.md, "Aborting a dead runner's turn")."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from forge.errors import ApprovalAnswered, StillRunning
from forge.models import SessionLease
from forge.runtime import abort_turn, answer, start_turn
from forge.runtime.approvals import pending
from forge.tools import Tool, temporary_tools
from tests.live import server_env

from . import turn_process
from .conftest import ahistory
from .test_abort_and_recovery import assert_nothing_open, slow_text, wait_until
from .test_turns import assistant, text_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


def two_calls() -> list[dict]:
    """One step calling ``qa_slow`` (call_1) and ``qa_fast`` (call_2)."""
    return [
        {"type": "tool-input-start", "call_id": "call_1", "tool": "qa_slow"},
        {"type": "tool-call", "call_id": "call_1", "tool": "qa_slow", "input": "{}"},
        {"type": "tool-input-start", "call_id": "call_2", "tool": "qa_fast"},
        {"type": "tool-call", "call_id": "call_2", "tool": "qa_fast", "input": "{}"},
        {"type": "finish-step", "finish_reason": "tool-calls", "usage": {"input": 5, "output": 3}},
    ]


def tools_by_call(reply: dict) -> dict[str, dict]:
    return {p["call_id"]: p for p in reply["parts"] if p["type"] == "tool"}


def assert_denied_by_abort(part: dict) -> None:
    state = part["state"]
    assert state["status"] == "error", state
    assert state["metadata"]["denied"] is True
    assert state["metadata"]["approval"]["approved"] is False
    assert state["metadata"]["approval"]["reason"] == "aborted"
    assert state["error"] == "this tool call was not run: the reply was aborted"


async def waiting_calls(session: Any) -> list[str]:
    found = await database_sync_to_async(pending.pending_approvals)(
        tenant=session.tenant, session=session
    )
    return [w["call_id"] for w in found]


async def test_abort_while_an_approved_call_runs_denies_the_waiting_one_and_ends_the_reply(
    session, agents, settings, script, user
):
    """The QA repro: both calls ask; call_1 is approved and runs; the user aborts. The
    reply ends as aborted, call_2 is denied as aborted, and answering it runs nothing."""
    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), text_reply("a step after the stop")])
    slow_started = asyncio.Event()
    ran: list[str] = []

    async def slow(ctx: Any, args: dict) -> str:
        ran.append("qa_slow")
        slow_started.set()
        await asyncio.sleep(60)
        return "slept"

    async def fast(ctx: Any, args: dict) -> str:
        ran.append("qa_fast")
        return "fast"

    with temporary_tools(
        Tool("qa_slow", "slow", {"type": "object"}, slow),
        Tool("qa_fast", "fast", {"type": "object"}, fast),
    ):
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(started.task, 30)
        assert await waiting_calls(session) == ["call_1", "call_2"]
        await answer(session=session, user=user, call_id="call_1", approve=True)
        await asyncio.wait_for(slow_started.wait(), 10)

        began = time.monotonic()
        await abort_turn(session=session)
        assert time.monotonic() - began < 2.0

        reply = assistant(await ahistory(session))
        assert reply["info"]["completed_at"] is not None
        assert reply["info"]["error"]["name"] == "MessageAbortedError"
        assert reply["info"]["error"]["message"] == "aborted"
        calls = tools_by_call(reply)
        assert calls["call_1"]["state"]["error"] == "aborted"
        assert calls["call_1"]["state"]["metadata"]["interrupted"] is True
        assert_denied_by_abort(calls["call_2"])
        assert await waiting_calls(session) == []
        assert_nothing_open(await ahistory(session))

        # Answering the denied call is refused and runs nothing: no tool, no step.
        with pytest.raises(ApprovalAnswered):
            await answer(session=session, user=user, call_id="call_2", approve=True)
        await asyncio.sleep(0.2)
    assert ran == ["qa_slow"]
    reply = assistant(await ahistory(session))
    assert [p for p in reply["parts"] if p["type"] == "text"] == []
    assert sum(p["type"] == "step-start" for p in reply["parts"]) == 1
    assert not await database_sync_to_async(SessionLease.objects.exists)()


async def test_abort_of_a_reply_that_only_waits_denies_its_calls_and_ends_it(
    session, agents, settings, script, user
):
    """No process runs a suspended reply; pressing stop still stops it (it was 409
    not_running, and the reply stayed open). The next prompt's model sees the denial."""
    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), text_reply("after the stop")])
    with temporary_tools(
        Tool("qa_slow", "slow", {"type": "object"}, lambda ctx, args: "slow"),
        Tool("qa_fast", "fast", {"type": "object"}, lambda ctx, args: "fast"),
    ):
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(started.task, 30)
        assert await waiting_calls(session) == ["call_1", "call_2"]

        await abort_turn(session=session)

        reply = assistant(await ahistory(session))
        assert reply["info"]["completed_at"] is not None
        assert reply["info"]["error"]["name"] == "MessageAbortedError"
        calls = tools_by_call(reply)
        assert_denied_by_abort(calls["call_1"])
        assert_denied_by_abort(calls["call_2"])
        assert await waiting_calls(session) == []
        with pytest.raises(ApprovalAnswered):
            await answer(session=session, user=user, call_id="call_1", approve=True)

        # The session is usable at once, and the model is shown why the calls did not run.
        settings.FORGE_MODEL = "offline/echo"
        await asyncio.wait_for((await start_turn(session=session, text="ok")).task, 10)
    items = await ahistory(session)
    assert items[-1]["info"]["error"] is None
    assert_nothing_open(items)
    from forge.context import request_for

    _, request = await database_sync_to_async(request_for)(session)
    assert "this tool call was not run: the reply was aborted" in str(request.as_dict()["messages"])


def _turn_env(
    tmp_path: Any, lease_seconds: int, *, words: int = 400, redis: bool = True
) -> dict[str, str]:
    """A process running a slow text reply (``words`` words, 20 a second)."""
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps([slow_text(words=words, pause=0.05)]))
    env = server_env(
        FORGE_MODEL="offline/script",
        FORGE_SCRIPT=str(script_path),
        FORGE_LEASE_SECONDS=str(lease_seconds),
    )
    if not redis:
        env.pop("REDIS_URL", None)  # an in-memory layer: no abort reaches this process
    return env


def _text_streaming(session: Any) -> bool:
    from sessions.models import Part

    return Part.objects.filter(session=session, type="text").exists()


@pytest.mark.timeout(120)
async def test_abort_of_a_turn_whose_process_was_killed_finalizes_it_before_the_lease_expires(
    session, agents, settings, tmp_path
):
    """The QA repro: a real process runs the reply and is killed with SIGKILL; the
    session says busy. Abort no longer answers 409 not_running and leaves it busy until
    the lease expires: once the dead holder's heartbeat is overdue (it renews every
    third of its lease), abort takes the session over and finalizes the turn."""
    lease_seconds = 9  # a renewal every 3 s; overdue after 6 s; expired after 9 s
    process = turn_process.popen(session.pk, _turn_env(tmp_path, lease_seconds))
    try:
        await wait_until(lambda: _text_streaming(session), timeout=60)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    held = await database_sync_to_async(SessionLease.objects.get)(session=session)
    assert held.expires_at > timezone.now()  # busy: the dead holder's lease is live

    await abort_turn(session=session, timeout=lease_seconds)

    assert timezone.now() < held.expires_at  # finalized before the lease would expire
    assert not await database_sync_to_async(SessionLease.objects.exists)()
    items = await ahistory(session)
    assert_nothing_open(items)
    reply = assistant(items)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    # The session takes a prompt at once.
    settings.FORGE_MODEL = "offline/echo"
    await asyncio.wait_for((await start_turn(session=session, text="again")).task, 10)
    assert assistant(await ahistory(session))["info"]["error"] is None


@pytest.mark.timeout(120)
async def test_abort_never_finalizes_a_live_runner_that_does_not_answer(
    session, agents, settings, tmp_path
):
    """A runner that is alive (its heartbeat is on time) but does not answer the abort
    (here: a process on an in-memory layer, which no abort reaches) is left alone:
    abort answers 409 ``still_running``, and the reply goes on to its normal end."""
    process = turn_process.popen(session.pk, _turn_env(tmp_path, 30, words=100, redis=False))
    try:
        await wait_until(lambda: _text_streaming(session), timeout=60)
        with pytest.raises(StillRunning) as refused:
            await abort_turn(session=session, timeout=1.0)
        assert refused.value.status == 409
        assert refused.value.code == "still_running"
        assert refused.value.retry_after >= 1
        reply = assistant(await ahistory(session))
        assert reply["info"]["completed_at"] is None  # untouched
        assert await database_sync_to_async(SessionLease.objects.exists)()
        assert process.wait(60) == 0, process.stdout.read() if process.stdout else ""
    finally:
        if process.poll() is None:
            process.kill()
    reply = assistant(await ahistory(session))
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"] is None  # it ended normally, not as aborted
