"""Abort and crash recovery: no reply stays open, no tool stays running."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone

from forge.models import SessionLease, Usage
from forge.runtime import NotRunning, abort_turn, recover_sessions, start_turn
from forge.tools import Tool, temporary_tools
from sessions import services
from tests.live import server_env

from . import turn_process
from .conftest import ahistory, alog, dead_lease

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


def slow_text(words: int, pause: float) -> list[dict]:
    events: list[dict] = [{"type": "text-start", "id": "t"}]
    for i in range(words):
        events.append({"type": "text-delta", "id": "t", "delta": f"w{i} "})
        events.append({"type": "sleep", "seconds": pause})
    return [
        *events,
        {"type": "text-end", "id": "t"},
        {"type": "finish-step", "finish_reason": "stop"},
    ]


def assert_nothing_open(items: list[dict]) -> None:
    for item in items:
        info = item["info"]
        if info["role"] != "assistant":
            continue
        assert info["completed_at"] is not None, info
        for part in item["parts"]:
            if part["type"] in ("text", "reasoning"):
                assert part["time"].get("end"), part
            if part["type"] == "tool":
                assert part["state"]["status"] in ("completed", "error"), part


async def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await database_sync_to_async(predicate)():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def streamed_parts(session: Any, kind: str) -> bool:
    from sessions.models import Part

    return Part.objects.filter(session=session, type=kind).exists()


async def test_abort_mid_text_keeps_what_streamed_and_finalizes_within_a_second(
    session, agents, script, record
):
    script(
        [
            slow_text(200, 0.02),
            [
                {"type": "text-start", "id": "t"},
                {"type": "text-delta", "id": "t", "delta": "next"},
                {"type": "text-end", "id": "t"},
            ],
        ]
    )
    recorder = await record(session)
    started = await start_turn(session=session, text="talk slowly")
    await wait_until(lambda: streamed_parts(session, "text"))
    await asyncio.sleep(0.2)
    began = time.monotonic()
    await abort_turn(session=session)
    assert time.monotonic() - began < 1.0
    assert started.task.done()
    frames = await recorder.settle()
    streamed = "".join(f["delta"] for f in frames if f["kind"] == "delta")
    items = await ahistory(session)
    reply = items[-1]
    assert reply["info"]["error"] == {
        "name": "MessageAbortedError",
        "message": "aborted",
        "retryable": False,
    }
    text = next(p for p in reply["parts"] if p["type"] == "text")
    assert streamed.startswith("w0 ")
    assert text["text"] == streamed.rstrip()
    assert_nothing_open(items)
    assert not await database_sync_to_async(SessionLease.objects.exists)()
    # The session takes the next prompt.
    await asyncio.wait_for((await start_turn(session=session, text="again")).task, 10)
    assert (
        next(p for p in (await ahistory(session))[-1]["parts"] if p["type"] == "text")["text"]
        == "next"
    )


async def test_a_second_abort_while_the_first_ends_the_reply_still_finalizes_it(
    session, agents, script, monkeypatch
):
    """A third-round finding (HIGH): two aborts at once through the channel layer (two
    tabs, a double click across daphnes) cancelled the turn twice; the second cancel
    broke the ending of the first, and the reply stayed open for good, its lease
    released. Here the second arrives while the first ending runs."""
    from forge.runtime import runner as runner_module
    from forge.runtime.processor import Processor

    flush = Processor.flush
    ending = asyncio.Event()

    async def slow_flush(self: Any) -> None:  # the ending's first await, made long
        ending.set()
        await asyncio.sleep(0.3)
        await flush(self)

    monkeypatch.setattr(Processor, "flush", slow_flush)
    script([slow_text(200, 0.02)])
    started = await start_turn(session=session, text="talk slowly")
    await wait_until(lambda: streamed_parts(session, "text"))
    message = {"type": "forge.abort", "session_id": session.pk}
    runner_module._abort_arrived(message)
    await asyncio.wait_for(ending.wait(), 5)  # the turn is inside its ending
    runner_module._abort_arrived(message)
    started.task.cancel()  # and a cancel that does not ask first, as a shutdown's
    await asyncio.wait({started.task}, timeout=10)
    reply = (await ahistory(session))[-1]
    assert reply["info"]["completed_at"]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    assert_nothing_open(await ahistory(session))
    assert not await database_sync_to_async(SessionLease.objects.exists)()


async def test_abort_stops_a_reply_whose_stream_swallows_the_cancellation(
    session, agents, settings
):
    """redis-py can swallow a task's cancellation while it reads a reply; seen as an
    abort that waited for the whole reply to stream. The turn must stop anyway."""
    from forge import providers
    from forge.providers import events as ev

    swallowed = asyncio.Event()
    sleeping = asyncio.Event()

    class Deaf:
        name = "deaf"

        async def stream(self, request: Any) -> Any:
            yield ev.StartStep()
            yield ev.TextStart("t")
            # A 50 s reply that spends nearly all its time in the swallowing sleep, so the
            # abort below lands there (not between two deltas) even on a loaded machine.
            for i in range(100):
                sleeping.set()
                try:
                    await asyncio.sleep(0.5)
                except asyncio.CancelledError:
                    swallowed.set()  # as the library did: the cancellation is lost
                sleeping.clear()
                yield ev.TextDelta("t", f"w{i} ")
            yield ev.TextEnd("t")
            yield ev.FinishStep("stop", ev.Usage())

    providers.register("deaf", lambda model: Deaf())
    settings.FORGE_MODEL = "deaf/any"
    started = await start_turn(session=session, text="talk")
    await wait_until(lambda: streamed_parts(session, "text"))
    await asyncio.wait_for(sleeping.wait(), 30)
    began = time.monotonic()
    await abort_turn(session=session)
    # Far below the 50 s the reply would take if the lost cancellation were waited out.
    assert time.monotonic() - began < 10.0
    assert started.task.done()
    assert swallowed.is_set()
    items = await ahistory(session)
    assert items[-1]["info"]["error"]["name"] == "MessageAbortedError"
    assert_nothing_open(items)


async def test_abort_while_a_tool_runs_interrupts_it(session, agents, script):
    tool_started = asyncio.Event()

    async def forever(ctx: Any, args: dict) -> str:
        tool_started.set()
        await asyncio.sleep(60)
        return "never"

    script(
        [
            [
                {"type": "tool-input-start", "call_id": "c1", "tool": "forever"},
                {"type": "tool-call", "call_id": "c1", "tool": "forever", "input": "{}"},
                {"type": "tool-input-start", "call_id": "c2", "tool": "list_files"},
                {"type": "finish-step", "finish_reason": "tool-calls"},
            ]
        ]
    )
    with temporary_tools(Tool("forever", "never ends", {"type": "object"}, forever)):
        started = await start_turn(session=session, text="run it")
        await asyncio.wait_for(tool_started.wait(), 10)
        began = time.monotonic()
        await abort_turn(session=session)
        assert time.monotonic() - began < 1.0
    assert started.task.cancelled() or started.task.done()
    items = await ahistory(session)
    tool = next(p for p in items[-1]["parts"] if p["type"] == "tool")
    assert tool["state"]["status"] == "error"
    assert tool["state"]["error"] == "aborted"
    assert tool["state"]["metadata"]["interrupted"] is True
    assert_nothing_open(items)


async def test_a_reply_aborted_while_its_tool_runs_carries_its_steps_tokens(
    session, agents, script
):
    """QA (LOW): a reply ended during a tool call (an abort, or recovery after a crash)
    kept ``info.tokens`` at zero and no cost, though its step-finish held the model
    call's usage and the usage table counted it: the message's update with them is
    written when the step's calls have run. Finalizing it takes them from its
    step-finish parts: the last step's tokens, the steps' summed cost."""
    tool_started = asyncio.Event()

    async def forever(ctx: Any, args: dict) -> str:
        tool_started.set()
        await asyncio.sleep(60)
        return "never"

    usage = {"input": 111, "output": 22}
    script(
        [
            [
                {"type": "tool-input-start", "call_id": "c1", "tool": "forever"},
                {"type": "tool-call", "call_id": "c1", "tool": "forever", "input": "{}"},
                {"type": "finish-step", "finish_reason": "tool-calls", "usage": usage},
            ]
        ]
    )
    with temporary_tools(Tool("forever", "never ends", {"type": "object"}, forever)):
        await start_turn(session=session, text="run it")
        await asyncio.wait_for(tool_started.wait(), 10)
        await wait_until(lambda: streamed_parts(session, "step-finish"))
        await abort_turn(session=session)
    items = await ahistory(session)
    info = items[-1]["info"]
    [finish] = [p for p in items[-1]["parts"] if p["type"] == "step-finish"]
    assert finish["tokens"]["input"] == 111
    assert info["tokens"] == finish["tokens"]
    assert info["cost"] == finish["cost"]
    assert_nothing_open(items)


async def test_abort_when_nothing_runs_is_an_error(session, agents):
    with pytest.raises(NotRunning):
        await abort_turn(session=session)


def _open_reply_left_by_a_dead_process(session: Any) -> str:
    """What a process killed mid-reply leaves: an open message, open parts, a stale lease."""
    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(session=session, part={"message_id": user, "type": "text", "text": "hi"})
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user}
    ).data["id"]
    services.update_part(
        session=session,
        part={
            "message_id": reply,
            "type": "text",
            "text": "",
            "time": {"start": "2026-11-30T00:00:00.000Z"},
        },
    )
    services.update_part(
        session=session,
        part={
            "message_id": reply,
            "type": "tool",
            "call_id": "c",
            "tool": "read_file",
            "state": {
                "status": "running",
                "input": {"path": "a"},
                "time": {"start": "2026-11-30T00:00:00.000Z"},
            },
        },
    )
    dead_lease(session, reply)
    return reply


async def test_recover_sessions_finalizes_what_a_dead_process_left(session, agents, capsys, record):
    reply_id = await database_sync_to_async(_open_reply_left_by_a_dead_process)(session)
    recorder = await record(session)
    await database_sync_to_async(call_command)("recover_sessions")
    assert f"{session.pk}: finalized {reply_id}" in capsys.readouterr().out
    # The dead runner never said idle: a page that saw busy would wait until a reload.
    frames = await recorder.settle()
    assert [f["status"] for f in recorder.kinds("status")] == ["idle"], frames
    assert frames[-1]["kind"] == "status"  # after the events that end the reply
    items = await ahistory(session)
    assert_nothing_open(items)
    reply = items[-1]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    assert "interrupted" in reply["info"]["error"]["message"]
    tool = next(p for p in reply["parts"] if p["type"] == "tool")
    assert tool["state"]["metadata"]["interrupted"] is True
    assert not await database_sync_to_async(SessionLease.objects.exists)()


def test_recover_sessions_of_an_unknown_session_says_so(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no session 'ses_bogus'"):
        call_command("recover_sessions", "--session", "ses_bogus")


async def test_a_live_lease_is_left_alone_by_recovery(session, agents):
    reply_id = await database_sync_to_async(_open_reply_left_by_a_dead_process)(session)
    await database_sync_to_async(SessionLease.objects.filter(session=session).update)(
        expires_at=timezone.now() + timedelta(minutes=5)
    )
    assert await database_sync_to_async(recover_sessions)() == {}
    items = await ahistory(session)
    assert items[-1]["info"]["id"] == reply_id
    assert items[-1]["info"]["completed_at"] is None
    # The command says what it left and until when (QA: it said only "recovered 0").
    said = StringIO()
    await database_sync_to_async(call_command)("recover_sessions", "--quiet", stdout=said)
    assert "recovered 0 session(s)" in said.getvalue()
    assert (
        f"1 session(s) with an open reply left alone: a live lease holds them ({session.pk})"
        in (said.getvalue())
    )


async def test_an_expired_lease_is_taken_over_and_its_turn_finalized(session, agents, settings):
    settings.FORGE_MODEL = "offline/echo"
    reply_id = await database_sync_to_async(_open_reply_left_by_a_dead_process)(session)
    started = await start_turn(session=session, text="are you there")
    await asyncio.wait_for(started.task, 10)
    items = await ahistory(session)
    old = next(item for item in items if item["info"]["id"] == reply_id)
    assert old["info"]["error"]["name"] == "MessageAbortedError"
    assert items[-1]["parts"][2]["text"] == "are you there"
    assert_nothing_open(items)


def _part_states(session: Any) -> dict[str, str]:
    from sessions.models import Part

    return {
        p.type: p.data.get("state", {}).get("status", "")
        for p in Part.objects.filter(session=session)
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("recovered_by", ["recover_sessions", "the next prompt"])
async def test_kill_9_mid_reply_then_recovery_leaves_nothing_open(
    session, agents, tmp_path, settings, recovered_by
):
    """A real process runs the turn; it is killed with SIGKILL while a tool runs. Then
    ``recover_sessions`` (start-up, the janitor, the command) or the next prompt's
    takeover of the expired lease finalizes it, keeping what had streamed."""
    script_path = tmp_path / "script.json"
    script_path.write_text(
        json.dumps(
            [
                [
                    {"type": "text-start", "id": "t"},
                    {"type": "text-delta", "id": "t", "delta": "Let me look. "},
                    {"type": "text-end", "id": "t"},
                    {"type": "reasoning-start", "id": "r"},
                    {"type": "reasoning-delta", "id": "r", "delta": "thinking"},
                    {"type": "tool-input-start", "call_id": "c1", "tool": "sleepy"},
                    {"type": "tool-call", "call_id": "c1", "tool": "sleepy", "input": "{}"},
                    {
                        "type": "finish-step",
                        "finish_reason": "tool-calls",
                        "usage": {"input": 120, "output": 30},
                    },
                ]
            ]
        )
    )
    env = server_env(
        FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script_path), FORGE_LEASE_SECONDS="1"
    )
    process = turn_process.popen(session.pk, env)
    try:
        await wait_until(lambda: _part_states(session).get("tool") == "running", timeout=60)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL, process.stdout.read() if process.stdout else ""
    items = await ahistory(session)
    assert items[-1]["info"]["completed_at"] is None  # left open by the dead process
    await asyncio.sleep(1.1)  # its lease expires
    if recovered_by == "recover_sessions":
        recovered = await database_sync_to_async(recover_sessions)()
        assert list(recovered) == [session.pk]
        items = await ahistory(session)
        reply = items[-1]
    else:
        settings.FORGE_MODEL = "offline/echo"
        started = await start_turn(session=session, text="are you there?")
        await asyncio.wait_for(started.task, 10)
        items = await ahistory(session)
        reply = items[-3]  # the interrupted reply, then the new prompt and its reply
    assert_nothing_open(items)
    parts = {p["type"]: p for p in reply["parts"]}
    assert parts["text"]["text"] == "Let me look."
    # A call runs once the model's step has ended: its reasoning was closed whole.
    assert parts["reasoning"]["text"] == "thinking"
    assert parts["reasoning"]["time"]["end"]
    assert parts["tool"]["state"]["status"] == "error"
    assert parts["tool"]["state"]["metadata"]["interrupted"] is True
    # The model's call had ended before its tool ran: what it used was logged then,
    # and the dead turn's usage counts it.
    assert parts["step-finish"]["tokens"]["input"] == 120
    used = await database_sync_to_async(
        lambda: list(
            Usage.objects.filter(model="offline/script").values_list(
                "input_tokens", "output_tokens", "steps"
            )
        )
    )()
    assert used == [(120, 30, 1)]
    # The next prompt to that session works.
    settings.FORGE_MODEL = "offline/echo"
    await asyncio.wait_for((await start_turn(session=session, text="still here")).task, 10)
    assert (await ahistory(session))[-1]["info"]["error"] is None


async def test_the_janitor_finalizes_an_expired_lease_without_waiting_for_a_prompt(
    session, agents, settings
):
    from forge.runtime import start_janitor

    settings.FORGE_LEASE_JANITOR = True
    await database_sync_to_async(_open_reply_left_by_a_dead_process)(session)
    janitor = start_janitor(interval=0.05)
    assert janitor is not None
    try:
        await wait_until(lambda: not SessionLease.objects.exists(), timeout=5)
    finally:
        janitor.stop()
    assert_nothing_open(await ahistory(session))


# A text finished, the step not yet: the finished part is written at its end (issue 19,
# item 4), not held for the batch that ends the step.
FINISHED_THEN_WAITING = [
    {"type": "text-start", "id": "t"},
    {"type": "text-delta", "id": "t", "delta": "All of it. "},
    {"type": "text-end", "id": "t"},
    {"type": "sleep", "seconds": 60},
    {"type": "finish-step", "finish_reason": "stop"},
]


def _finished_text_logged(session: Any) -> bool:
    """The text part's end (its whole text) is in the log, while the step goes on."""
    from sessions.models import Part

    parts = {p.type: p.data for p in Part.objects.filter(session=session)}
    text = parts.get("text", {})
    return bool(text.get("time", {}).get("end")) and "step-finish" not in parts


async def test_a_finished_text_is_logged_at_its_end_not_at_the_steps(
    session, agents, script, record
):
    script([FINISHED_THEN_WAITING])
    recorder = await record(session)
    started = await start_turn(session=session, text="answer, then wait")
    # Fails if the finished text waited for the step's end (60 s away).
    await wait_until(lambda: _finished_text_logged(session), timeout=30)
    items = await ahistory(session)
    assert items[-1]["parts"][1]["text"] == "All of it."
    assert items[-1]["info"]["completed_at"] is None  # the step goes on
    await abort_turn(session=session)
    assert started.task.done()
    frames = await recorder.settle()
    items = await ahistory(session)
    assert_nothing_open(items)
    reply = items[-1]
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    # The cut step's end, its tokens estimated (an aborted reply is billed: QA, HIGH).
    assert [p["type"] for p in reply["parts"]] == ["step-start", "text", "step-finish"]
    assert reply["parts"][2]["reason"] == "aborted"
    assert reply["parts"][1]["text"] == "All of it."
    log = {e["seq"]: e for e in await alog(session)}
    events = [f for f in frames if f["kind"] == "event"]
    # Each a frame of its own, in log order (channels-redis may drop one as the turn is
    # cancelled: the bus is at-most-once, clients repair from the log).
    assert [f["seq"] for f in events] == sorted({f["seq"] for f in events})
    assert all(f["id"] == log[f["seq"]]["id"] for f in events)
    if django_settings.FORGE_TEST_STACK == "embedded":
        assert [f["seq"] for f in events] == list(range(2, max(log) + 1))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("redis", ["with Redis", "without Redis"])
async def test_kill_9_after_a_text_finished_keeps_the_whole_text(session, agents, tmp_path, redis):
    """A real process is killed with SIGKILL just after ``text-end``, the step still
    going: the finished text is in the log already, so recovery keeps it whole, on
    both stacks, whether or not a Redis mirror kept what had streamed. (Before issue
    19 the write was held for the step's end: without Redis, recovery closed the part
    with the log's empty text.) The embedded stack has no Redis: there both cases run
    without."""
    if redis == "with Redis" and not django_settings.REDIS_URL:
        pytest.skip("the embedded stack has no Redis (the case without it covers it)")
    script_path = tmp_path / "script.json"
    script_path.write_text(json.dumps([FINISHED_THEN_WAITING]))
    env = server_env(
        FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script_path), FORGE_LEASE_SECONDS="1"
    )
    if redis == "without Redis":  # the process runs with no in-flight mirror
        env.pop("REDIS_URL", None)
        env.pop("FORGE_REDIS_PREFIX", None)
    process = turn_process.popen(session.pk, env)
    try:
        await wait_until(lambda: _finished_text_logged(session), timeout=60)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    await asyncio.sleep(1.1)  # its lease expires
    recovered = await database_sync_to_async(recover_sessions)()
    assert list(recovered) == [session.pk]
    items = await ahistory(session)
    assert_nothing_open(items)
    reply = items[-1]
    # The step the process died in is billed (estimated: ``recovery.dead_step_end``).
    assert [p["type"] for p in reply["parts"]] == ["step-start", "text", "step-finish"]
    assert reply["parts"][1]["text"] == "All of it."
    assert reply["parts"][2]["reason"] == "aborted"
    assert reply["parts"][2]["tokens"]["output"] == len("All of it.") // 4
    assert await database_sync_to_async(verified_log)(session) == []


def verified_log(session: Any) -> list[Any]:
    from sessions import selectors

    return selectors.verify_log(tenant=session.tenant, session=session)


async def test_a_stream_that_fails_right_after_a_text_ends_keeps_the_text(
    session, agents, settings
):
    """The processor reads one event ahead at a text's end (to write the text with the
    step's end when that is already there). A failure in that read is raised in order:
    the text, finished before it, is logged whole; the reply ends as a server failure."""
    from forge import providers
    from forge.providers import events as ev

    class Breaks:
        name = "breaks"

        async def stream(self, request: Any) -> Any:
            yield ev.StartStep()
            yield ev.TextStart("t")
            yield ev.TextDelta("t", "Said in full. ")
            yield ev.TextEnd("t")
            raise RuntimeError("the connection broke")

    providers.register("breaks", lambda model: Breaks())
    settings.FORGE_MODEL = "breaks/any"
    started = await start_turn(session=session, text="talk")
    await asyncio.wait_for(started.task, 30)
    items = await ahistory(session)
    assert_nothing_open(items)
    reply = items[-1]
    assert reply["info"]["error"]["name"] == "UnknownError"
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["Said in full."]
