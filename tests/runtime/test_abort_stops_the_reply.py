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


def slow_and_fast() -> Any:
    """The two tools the approval rules below ask about (``qa_*``), as temporary tools."""
    return temporary_tools(
        Tool("qa_slow", "slow", {"type": "object"}, lambda ctx, args: "slow"),
        Tool("qa_fast", "fast", {"type": "object"}, lambda ctx, args: "fast"),
    )


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
    with slow_and_fast():
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


def _assert_aborted_with_calls_denied(reply: dict) -> None:
    assert reply["info"]["completed_at"] is not None, reply["info"]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    calls = tools_by_call(reply)
    assert_denied_by_abort(calls["call_1"])
    assert_denied_by_abort(calls["call_2"])


async def test_an_abort_arriving_as_the_turn_suspends_ends_the_reply(
    session, agents, settings, script, user, monkeypatch
):
    """Review (LOW): the stop reached the runner as its turn suspended for approval (its
    step written, the reply open and waiting, its buffers being dropped): the runner
    ended without ending the reply, and the abort answered that it had stopped it. The
    reply stayed open, its calls waiting; and the cancel broke the turn's clean-up,
    which left the provider's connections open."""
    from forge.runtime import steps
    from forge.runtime.processor import Processor

    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), text_reply("never")])
    real_forget, real_resolve = Processor.forget, steps.resolve
    forgetting, closed = asyncio.Event(), []

    async def slow_forget(self: Any) -> None:
        forgetting.set()
        await asyncio.sleep(0.3)
        await real_forget(self)

    def resolve(model: str) -> Any:
        provider = real_resolve(model)

        class Closing:
            def stream(self, request: Any) -> Any:
                return provider.stream(request)

            async def aclose(self) -> None:
                closed.append(model)

        return Closing()

    monkeypatch.setattr(Processor, "forget", slow_forget)
    monkeypatch.setattr(steps, "resolve", resolve)
    with slow_and_fast():
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(forgetting.wait(), 30)
        await asyncio.wait_for(abort_turn(session=session), 10)
        await asyncio.gather(started.task, return_exceptions=True)

        _assert_aborted_with_calls_denied(assistant(await ahistory(session)))
        assert await waiting_calls(session) == []
        with pytest.raises(ApprovalAnswered):
            await answer(session=session, user=user, call_id="call_1", approve=True)
    assert closed, "the provider was not closed"
    assert_nothing_open(await ahistory(session))
    assert not await database_sync_to_async(SessionLease.objects.exists)()


async def test_an_abort_sent_to_a_runner_that_suspends_meanwhile_ends_the_reply(
    session, agents, settings, script
):
    """Review (LOW): the abort went to the process holding the lease, whose turn then
    suspended for approval (the abort dropped: no turn runs there any more) and gave the
    lease back. The aborter took the lease's end for the turn's and answered success;
    the reply stayed open, waiting."""
    from datetime import timedelta

    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), text_reply("never")])
    with slow_and_fast():
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(started.task, 30)
        assert await waiting_calls(session) == ["call_1", "call_2"]

        # Another process runs the turn (its step still writing as the abort is sent).
        now = timezone.now()
        await database_sync_to_async(SessionLease.objects.create)(
            session=session,
            tenant_id=session.tenant_id,
            owner="another-process:1",
            message_id=started.assistant_message_id,
            acquired_at=now,
            heartbeat_at=now,
            expires_at=now + timedelta(seconds=60),
        )
        aborting = asyncio.create_task(abort_turn(session=session))
        await asyncio.sleep(0.3)
        # It suspends, the abort finding no turn there, and gives the lease back.
        await database_sync_to_async(SessionLease.objects.filter(session=session).delete)()
        await asyncio.wait_for(aborting, 10)

        _assert_aborted_with_calls_denied(assistant(await ahistory(session)))
        assert await waiting_calls(session) == []
    assert_nothing_open(await ahistory(session))


async def test_an_abort_during_the_runners_own_end_leaves_the_session_free(
    session, agents, settings, script, user, monkeypatch
):
    """Review (LOW): an abort reaching the runner after its turn had suspended, while
    the runner stopped its heartbeat, cancelled that cleanup: the runner stayed
    registered and the lease held, so the session was busy until the lease expired
    and the abort waited for a holder that no longer renewed."""
    from forge.runtime import heartbeat
    from forge.runtime import runner as runner_module

    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), text_reply("never")])
    real_heartbeat = heartbeat.run
    stopping = asyncio.Event()

    async def slow_to_stop(turn: Any, task: Any) -> None:
        try:
            await real_heartbeat(turn, task)
        except asyncio.CancelledError:
            stopping.set()
            await asyncio.shield(asyncio.sleep(0.5))  # a renewal in flight, finishing
            raise

    monkeypatch.setattr(heartbeat, "run", slow_to_stop)
    with slow_and_fast():
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(stopping.wait(), 30)
        began = time.monotonic()
        await abort_turn(session=session, timeout=5)
        assert time.monotonic() - began < 3
        await asyncio.gather(started.task, return_exceptions=True)

        _assert_aborted_with_calls_denied(assistant(await ahistory(session)))
    assert runner_module.running_turn(session.pk) is None
    assert not await database_sync_to_async(SessionLease.objects.exists)()


async def _cancel_once_committed(monkeypatch: Any, module: Any, name: str, call: Any) -> None:
    """Run ``call()`` as a task, and cancel it once the database work ``module.name``
    (run on the database thread) has committed, before it returns: a caller that went
    away as its request was being served (a server stopping, a closed socket)."""
    import threading

    real = getattr(module, name)
    committed = threading.Event()

    def slow_to_return(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        committed.set()
        time.sleep(0.3)
        return result

    monkeypatch.setattr(module, name, slow_to_return)
    task = asyncio.create_task(call())
    await wait_until(committed.is_set, timeout=20)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(module, name, real)


async def test_a_prompt_whose_caller_is_cancelled_once_it_is_logged_is_answered(
    session, agents, settings, script, monkeypatch
):
    """Review (LOW): the caller of a prompt cancelled while its transaction ran (which
    went on in the database's thread and committed: the prompt logged, the reply
    opened, the lease taken) left no runner: the session stayed busy, the reply open,
    until the lease expired and the janitor ended it as interrupted."""
    from forge.runtime import runner as runner_module

    script([text_reply("answered all the same")])
    await _cancel_once_committed(
        monkeypatch,
        runner_module,
        "begin_turn",
        lambda: start_turn(session=session, text="hello"),
    )
    await wait_until(lambda: not SessionLease.objects.filter(session=session).exists(), timeout=10)
    reply = assistant(await ahistory(session))
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"] is None
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["answered all the same"]


async def test_an_answer_whose_caller_is_cancelled_once_it_is_logged_goes_on(
    session, agents, settings, script, user, monkeypatch
):
    """Review (LOW): an approval whose caller was cancelled as its answers' transaction
    committed (the answer logged, the lease taken) ran nothing: the approved call never
    ran, and the session stayed busy until the lease expired."""
    from forge.runtime.approvals import pending as pending_module

    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), text_reply("done after both")])
    ran: list[str] = []

    def slow(ctx: Any, args: dict) -> str:
        ran.append("slow")
        return "s"

    def fast(ctx: Any, args: dict) -> str:
        ran.append("fast")
        return "f"

    with temporary_tools(
        Tool("qa_slow", "slow", {"type": "object"}, slow),
        Tool("qa_fast", "fast", {"type": "object"}, fast),
    ):
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(started.task, 30)
        await answer(session=session, user=user, call_id="call_1", approve=True)
        await wait_until(  # call_1 run, the turn suspended again
            lambda: ran == ["slow"] and not SessionLease.objects.filter(session=session).exists()
        )
        assert await waiting_calls(session) == ["call_2"]
        await _cancel_once_committed(
            monkeypatch,
            pending_module,
            "log_answers",
            lambda: answer(session=session, user=user, call_id="call_2", approve=True),
        )
        await wait_until(
            lambda: not SessionLease.objects.filter(session=session).exists(), timeout=10
        )
    reply = assistant(await ahistory(session))
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"] is None
    assert sorted(ran) == ["fast", "slow"]


async def _foreign_lease(session: Any, message_id: str) -> None:
    """The session's lease as another process holding it (its turn's step still being
    written as the abort is sent)."""
    from datetime import timedelta

    now = timezone.now()
    await database_sync_to_async(SessionLease.objects.create)(
        session=session,
        tenant_id=session.tenant_id,
        owner="another-process:1",
        message_id=message_id,
        acquired_at=now,
        heartbeat_at=now,
        expires_at=now + timedelta(seconds=60),
    )


async def test_an_abort_that_goes_on_with_a_suspended_reply_never_stops_the_next_turn(
    session, agents, settings, script, monkeypatch
):
    """Review (MEDIUM): going on with the reply its runner left open, the abort stopped
    whatever the session ran by then: a prompt sent meanwhile (which ended the waiting
    reply) had its own reply aborted."""
    from forge.runtime import runner as runner_module

    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), slow_text(words=20, pause=0.02)])
    real_once = runner_module._abort_once
    passes: list[Any] = []
    second: dict[str, Any] = {}

    async def once(session: Any, timeout: float, only: str | None = None) -> Any:
        passes.append(only)
        if len(passes) == 2:  # the first pass's reply found open: a prompt lands now
            second["started"] = await start_turn(session=session, text="a new prompt")
        return await real_once(session, timeout, only=only)

    monkeypatch.setattr(runner_module, "_abort_once", once)
    with slow_and_fast():
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(started.task, 30)
        await _foreign_lease(session, started.assistant_message_id)
        aborting = asyncio.create_task(abort_turn(session=session))
        await asyncio.sleep(0.3)
        await database_sync_to_async(SessionLease.objects.filter(session=session).delete)()
        await asyncio.wait_for(aborting, 10)
        await asyncio.wait_for(second["started"].task, 30)

    items = await ahistory(session)
    first = next(i for i in items if i["info"]["id"] == started.assistant_message_id)
    assert first["info"]["completed_at"] is not None  # ended by the new prompt
    new_reply = assistant(items)
    assert new_reply["info"]["id"] == second["started"].assistant_message_id
    assert new_reply["info"]["error"] is None, new_reply["info"]["error"]
    assert_nothing_open(items)


async def test_an_abort_whose_runner_ends_past_its_deadline_still_ends_the_reply(
    session, agents, settings, script, monkeypatch
):
    """Review (LOW): the holder's lease went as the abort's time ran out; the abort
    answered success and left the suspended reply open, its calls waiting."""
    from forge.runtime import lease

    settings.FORGE_TOOL_APPROVAL = {"qa_*": "ask", "*": "allow"}
    script([two_calls(), text_reply("never")])
    real_current = lease.current
    with slow_and_fast():
        started = await start_turn(session=session, text="run both")
        await asyncio.wait_for(started.task, 30)
        await _foreign_lease(session, started.assistant_message_id)
        reads: list[str] = []

        def current(**kwargs: Any) -> Any:
            reads.append(kwargs["session_id"])
            if len(reads) > 1:  # the abort sent, the holder suspends: its lease goes
                SessionLease.objects.filter(session_id=kwargs["session_id"]).delete()
            return real_current(**kwargs)

        monkeypatch.setattr(lease, "current", current)
        # No time to wait: the lease's end is seen past the deadline.
        await asyncio.wait_for(abort_turn(session=session, timeout=0), 10)

        _assert_aborted_with_calls_denied(assistant(await ahistory(session)))
        assert await waiting_calls(session) == []
    assert_nothing_open(await ahistory(session))


async def test_a_subtask_starting_as_its_parent_is_aborted_is_stopped(
    session, agents, settings, monkeypatch
):
    """Review (MEDIUM): the parent aborted while its subtask's prompt was being logged:
    the child's turn was started (a committed prompt's turn is), but the ``task`` tool
    never learned of it and the child ran to its end unwatched, its tools run after
    the user's stop."""
    import threading

    from forge.runtime import runner as runner_module
    from sessions.models import Session

    settings.FORGE_MODEL = "offline/echo"
    real, committed = runner_module.begin_turn, threading.Event()

    def slow_child(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if args[4] > 0:  # depth: the child's prompt, committed
            committed.set()
            time.sleep(0.5)
        return result

    monkeypatch.setattr(runner_module, "begin_turn", slow_child)
    ran: list[str] = []

    def mark(ctx: Any, args: dict) -> str:
        ran.append("mark")
        return "marked"

    with temporary_tools(Tool("qa_mark", "mark", {"type": "object"}, mark)):
        asked = {"agent": "build", "prompt": "/tool qa_mark {}", "description": "child"}
        started = await start_turn(session=session, text=f"/tool task {json.dumps(asked)}")
        await wait_until(committed.is_set, timeout=20)
        await abort_turn(session=session)
        await asyncio.gather(started.task, return_exceptions=True)
        await asyncio.sleep(1.0)
    assert ran == []
    child = await database_sync_to_async(Session.objects.get)(parent=session)
    child_reply = assistant(await ahistory(child))
    assert child_reply["info"]["completed_at"] is not None
    assert child_reply["info"]["error"]["name"] == "MessageAbortedError"
    assert not await database_sync_to_async(SessionLease.objects.exists)()
