"""The edges of billing a cut step (review of "an aborted reply bills its cut step"): a
step the provider refused or is retrying bills nothing when the turn is stopped after
it; a cut later step's cost reaches the reply's own ``cost``; streamed tool arguments
are output billed like text."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from forge import providers
from forge.aisdk.chunks import ReplyChunks
from forge.models import Usage
from forge.providers import events as ev
from forge.runtime import abort_turn, start_turn
from forge.runtime import steps as steps_module
from forge.runtime.processor import Processor
from forge.tools import Tool, temporary_tools
from sessions import selectors
from sessions.models import Part, SessionEvent
from tests.runtime.test_abort_and_recovery import slow_text, wait_until
from tests.runtime.test_turns import tool_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

PRICED = {"input": 1.0, "output": 1.0}  # dollars per million tokens


def _reply(session: Any, message_id: str) -> dict[str, Any]:
    items = selectors.iter_history(tenant=session.tenant, session_id=session.pk)
    return next(i for i in items if i["info"]["id"] == message_id)


def _step_ends(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in reply["parts"] if p["type"] == "step-finish"]


def _chunk_types(session: Any, message_id: str) -> list[str]:
    chunks = ReplyChunks(message_id)
    found: list[str] = []
    for kind, data in (
        SessionEvent.objects.filter(session=session).order_by("seq").values_list("type", "data")
    ):
        found += [c["type"] for c in chunks.accept({"kind": "event", "type": kind, "data": data})]
    return found


async def _stop(session: Any, started: Any) -> dict[str, Any]:
    await abort_turn(session=session)
    await asyncio.wait_for(asyncio.gather(started.task, return_exceptions=True), 10)
    return await sync_to_async(_reply)(session, started.assistant_message_id)


async def test_a_step_refused_for_overflow_bills_nothing_when_stopped_during_compaction(
    session, agents, settings, monkeypatch
):
    """The provider refused the step (the context overflowed) and billed nothing; a stop
    during the compaction that follows billed the refused request as ``aborted``, in a
    step-finish with no step-start (and an AI SDK ``finish-step`` with no
    ``start-step``)."""
    settings.FORGE_AUTO_COMPACT = True
    settings.FORGE_MODEL_PRICES = {**settings.FORGE_MODEL_PRICES, "overflowing/x": PRICED}

    class Overflowing:
        name = "overflowing"

        async def stream(self, request: Any):
            yield ev.StartStep()
            yield ev.Error(
                name="APIError",
                message="maximum context length (context_length_exceeded)",
                status=400,
            )

    providers.register("overflowing", lambda model: Overflowing())
    settings.FORGE_MODEL = "overflowing/x"
    compacting = asyncio.Event()

    async def slow_compaction(*args: Any, **kwargs: Any) -> None:
        compacting.set()
        await asyncio.sleep(30)

    monkeypatch.setattr(steps_module, "compact", slow_compaction)
    started = await start_turn(session=session, text="hello " * 400)
    await asyncio.wait_for(compacting.wait(), 10)
    reply = await _stop(session, started)
    assert _step_ends(reply) == []
    assert not await sync_to_async(Usage.objects.filter(steps__gt=0).exists)()
    chunks = await sync_to_async(_chunk_types)(session, started.assistant_message_id)
    assert "finish-step" not in chunks


async def test_a_step_waiting_for_its_retry_bills_nothing_when_stopped(session, agents, settings):
    """A request being retried (a 429, a 5xx, in its backoff) was not served: a stop
    then billed its whole estimated input."""

    backing_off = asyncio.Event()

    class RateLimited:
        name = "limited"

        async def stream(self, request: Any):
            yield ev.StartStep()  # as the OpenAI provider: before its HTTP request
            yield ev.Retry(attempt=2, next_at=1900000000.0, message="HTTP 429 rate limited")
            backing_off.set()  # the retry was read
            await asyncio.sleep(30)  # the backoff

    providers.register("limited", lambda model: RateLimited())
    settings.FORGE_MODEL = "limited/x"
    started = await start_turn(session=session, text="hello " * 400)
    await asyncio.wait_for(backing_off.wait(), 10)
    await asyncio.sleep(0.3)  # and handled
    reply = await _stop(session, started)
    # Nor is the step logged: a bare step-start was left (review).
    assert [p["type"] for p in reply["parts"] if p["type"].startswith("step-")] == []


async def test_a_cut_later_step_adds_its_cost_to_the_replys(session, agents, settings, script):
    """A reply whose first step (a tool call) was done carried that step's cost; the
    cut second step's cost reached the usage table but not the reply's ``cost``, which
    said less than was billed."""
    agents["build"].tools = ["read_file"]
    await sync_to_async(agents["build"].save)()
    settings.FORGE_MODEL_PRICES = {**settings.FORGE_MODEL_PRICES, "offline/script": PRICED}
    script([tool_reply("read_file", '{"path": "missing.txt"}'), slow_text(300, 0.02)])
    started = await start_turn(session=session, text="go " * 300)
    await wait_until(lambda: Part.objects.filter(session=session, type="text").exists())
    await asyncio.sleep(0.3)
    reply = await _stop(session, started)
    ends = _step_ends(reply)
    assert [end["reason"] for end in ends] == ["tool-calls", "aborted"]
    assert reply["info"]["cost"] == round(sum(end["cost"] for end in ends), 10)
    assert reply["info"]["tokens"] == ends[-1]["tokens"]
    billed = await sync_to_async(lambda: sum(Usage.objects.values_list("cost_nanos", flat=True)))()
    assert billed == round(reply["info"]["cost"] * 1e9)


async def test_streamed_tool_arguments_are_billed_as_output(session, agents, settings):
    """A stop while the model streamed a long ``write_file`` argument billed no output."""

    streamed = asyncio.Event()

    class LongArguments:
        name = "long-arguments"

        async def stream(self, request: Any):
            yield ev.StartStep()
            yield ev.ToolInputStart("c1", "write_file")
            for sent in range(400):
                yield ev.ToolInputDelta("c1", "x" * 100)
                if sent == 60:
                    streamed.set()  # 6,000 characters read
                await asyncio.sleep(0.01)
            yield ev.FinishStep("stop", ev.Usage())

    providers.register("long-arguments", lambda model: LongArguments())
    settings.FORGE_MODEL = "long-arguments/x"
    started = await start_turn(session=session, text="write a big file")
    await asyncio.wait_for(streamed.wait(), 10)
    reply = await _stop(session, started)
    (end,) = _step_ends(reply)
    assert end["reason"] == "aborted"
    assert end["tokens"]["output"] >= 1000  # 4,000+ characters streamed, / 4


async def test_a_stop_while_a_broken_off_steps_blocks_are_written_bills_nothing(
    session, agents, settings, monkeypatch
):
    """The stream ended early (no finish): the step's open blocks are written, then it
    is known broken off; a stop during that write billed it as ``aborted`` (review)."""
    settings.FORGE_MODEL_PRICES = {**settings.FORGE_MODEL_PRICES, "ended-early/x": PRICED}
    closing = asyncio.Event()
    close_open_blocks = Processor.close_open_blocks

    async def slow_close(self: Processor) -> None:
        if self.blocks:
            closing.set()
            await asyncio.sleep(0.5)  # a slow write (the database, the mirror)
        await close_open_blocks(self)

    monkeypatch.setattr(Processor, "close_open_blocks", slow_close)

    class EndedEarly:
        name = "ended-early"

        async def stream(self, request: Any):
            yield ev.StartStep()
            yield ev.TextStart("t")
            yield ev.TextDelta("t", "partial " * 50)

    providers.register("ended-early", lambda model: EndedEarly())
    settings.FORGE_MODEL = "ended-early/x"
    started = await start_turn(session=session, text="hello " * 40)
    await asyncio.wait_for(closing.wait(), 10)
    reply = await _stop(session, started)
    assert _step_ends(reply) == []


async def test_a_stop_during_a_later_steps_calls_leaves_the_replys_cost_its_steps_sum(
    session, agents, settings, script
):
    """Step 2 had finished and its call was running when the stop came: its step-finish
    was billed, but the reply kept step 1's cost and tokens (review)."""
    settings.FORGE_MODEL_PRICES = {**settings.FORGE_MODEL_PRICES, "offline/script": PRICED}
    runs = 0
    second = asyncio.Event()

    async def slow(ctx: Any, args: dict[str, Any]) -> str:
        nonlocal runs
        runs += 1
        if runs == 2:
            second.set()
            await asyncio.sleep(60)
        return "ok"

    def call(call_id: str, usage: dict[str, int]) -> list[dict[str, Any]]:
        return [
            {"type": "tool-input-start", "call_id": call_id, "tool": "slow"},
            {"type": "tool-call", "call_id": call_id, "tool": "slow", "input": "{}"},
            {"type": "finish-step", "finish_reason": "tool-calls", "usage": usage},
        ]

    script([call("c1", {"input": 1000, "output": 10}), call("c2", {"input": 5000, "output": 20})])
    with temporary_tools(Tool("slow", "a slow tool", {"type": "object"}, slow)):
        started = await start_turn(session=session, text="go")
        await asyncio.wait_for(second.wait(), 10)
        reply = await _stop(session, started)
    ends = _step_ends(reply)
    assert [end["tokens"]["input"] for end in ends] == [1000, 5000]
    assert reply["info"]["cost"] == round(sum(end["cost"] for end in ends), 10)
    assert reply["info"]["tokens"] == ends[-1]["tokens"]
