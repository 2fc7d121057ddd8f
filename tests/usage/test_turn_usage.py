"""Usage, metrics and the turn-end log after real turns through the runtime: a finished
tool-using turn, a failed one and an aborted one. The usage table equals the fold of
the logs (rebuild_usage), on both engines."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from prometheus_client import REGISTRY

from forge.models import Usage
from forge.runtime import abort_turn, start_turn
from forge.usage.services import rebuild_usage
from sessions.services import create_session
from tests.runtime.test_abort_and_recovery import slow_text, wait_until
from tests.runtime.test_turns import run, text_reply, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def rows() -> list[tuple]:
    return sorted(
        Usage.objects.values_list(
            "user_id",
            "agent",
            "model",
            "day",
            "turns",
            "steps",
            "input_tokens",
            "output_tokens",
            "cost_nanos",
            "failed",
            "aborted",
            "tool_calls",
        )
    )


async def test_usage_metrics_and_logs_follow_real_turns(session, user, agents, script, caplog):
    caplog.set_level(logging.INFO, logger="forge.turns")
    agents["build"].tools = ["read_file"]
    await sync_to_async(agents["build"].save)()
    labels = {"agent": "build", "model": "offline/script"}
    before = {
        name: sample(f"forge_turns_{name}_total", **labels)
        for name in ("started", "finished", "failed", "aborted")
    }
    replies_before = sample("forge_reply_seconds_count", **labels)
    firsts_before = sample("forge_first_delta_seconds_count", **labels)
    errors_before = sample("forge_provider_errors_total", provider="offline", kind="http_503")

    # a finished turn: a tool call, then the answer (two steps)
    script(
        [
            tool_reply("read_file", '{"path": "missing.txt"}'),
            text_reply("it is not there", usage={"input": 40, "output": 4}),
        ]
    )
    await run(session, "read the file")
    # a failed turn, in a session of its own (the script counts replies per session)
    failing = await sync_to_async(create_session)(user=user)
    script([[{"type": "error", "name": "ProviderError", "message": "HTTP 503 from the model"}]])
    await run(failing, "fail please")
    # an aborted turn
    aborting = await sync_to_async(create_session)(user=user)
    script([slow_text(200, 0.02)])
    started = await start_turn(session=aborting, text="talk slowly")

    firsts = sample("forge_first_delta_seconds_count", **labels)
    await wait_until(lambda: sample("forge_first_delta_seconds_count", **labels) > firsts)
    await abort_turn(session=aborting)
    await asyncio.wait_for(asyncio.gather(started.task, return_exceptions=True), 10)

    recorded = await sync_to_async(rows)()
    # one user, agent, model and day (the untitled sessions' titles are the small model's)
    (row,) = [r for r in recorded if r[2] == "offline/script"]
    turns, steps, _, output_tokens, _, failed, aborted, tool_calls = row[4:]
    assert (turns, failed, aborted, tool_calls) == (3, 1, 1, 1)
    # The finished turn's two, and the aborted one's step, billed as estimated (it logged
    # none, and cost nothing: QA, HIGH); the failed one's provider failed before a step.
    assert steps == 3
    assert output_tokens >= 7
    await sync_to_async(rebuild_usage)()
    assert await sync_to_async(rows)() == recorded  # the table is the fold of the logs

    after = {
        name: sample(f"forge_turns_{name}_total", **labels)
        for name in ("started", "finished", "failed", "aborted")
    }
    assert {k: after[k] - before[k] for k in after} == {
        "started": 3,
        "finished": 1,
        "failed": 1,
        "aborted": 1,
    }
    assert sample("forge_reply_seconds_count", **labels) - replies_before == 3
    assert firsts - firsts_before == 1  # the finished turn's (its second step streamed)
    assert (
        sample("forge_provider_errors_total", provider="offline", kind="http_503") - errors_before
        == 1
    )
    assert sample("forge_append_seconds_count") > 0

    lines = [r for r in caplog.records if r.name == "forge.turns"]
    outcomes = sorted(r.forge["outcome"] for r in lines)
    assert outcomes == ["aborted", "failed", "finished"]
    finished = next(r.forge for r in lines if r.forge["outcome"] == "finished")
    assert finished["session_id"] == session.pk
    assert finished["steps"] == 2
    assert finished["first_delta_ms"] is not None
    assert "prompt" not in finished
    assert "read the file" not in json.dumps([r.forge for r in lines])


async def test_an_aborted_reply_bills_its_cut_step_as_estimated(session, user, agents, script):
    """QA (HIGH): a reply stopped while the model streamed logged no step-finish, so it
    billed nothing: its usage and the budget stayed where they were, and a user who
    stopped every reply went past any budget. The cut step's end is logged with its
    tokens estimated: the request's characters / 4 in, the streamed text's out."""
    labels = {"agent": "build", "model": "offline/script"}
    script([slow_text(300, 0.02)])
    firsts = sample("forge_first_delta_seconds_count", **labels)
    started = await start_turn(session=session, text="talk slowly " + "and at length " * 200)
    await wait_until(lambda: sample("forge_first_delta_seconds_count", **labels) > firsts)
    await asyncio.sleep(0.5)  # some 25 words streamed
    await abort_turn(session=session)
    await asyncio.wait_for(asyncio.gather(started.task, return_exceptions=True), 10)

    reply = await sync_to_async(_last_reply)(session)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    (end,) = [p for p in reply["parts"] if p["type"] == "step-finish"]
    assert end["reason"] == "aborted"
    streamed = sum(len(p["text"]) for p in reply["parts"] if p["type"] == "text")
    assert end["tokens"]["output"] == streamed // 4 > 0
    assert end["tokens"]["input"] > 2800 // 4  # the prompt alone is ~2,800 characters
    recorded = await sync_to_async(rows)()
    (row,) = [r for r in recorded if r[2] == "offline/script"]
    assert row[5:8] == (1, end["tokens"]["input"], end["tokens"]["output"])  # steps, in, out
    await sync_to_async(rebuild_usage)()
    assert await sync_to_async(rows)() == recorded


def _last_reply(session) -> dict:
    from sessions import selectors

    items = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    return next(i for i in reversed(items) if i["info"]["role"] == "assistant")


async def test_the_turn_line_carries_the_prompt_only_when_asked(session, agents, settings, caplog):
    caplog.set_level(logging.INFO, logger="forge.turns")
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_LOG_PROMPTS = True
    await run(session, "say this back")
    (line,) = [r.forge for r in caplog.records if r.name == "forge.turns"]
    assert line["prompt"] == "say this back"
    assert line["outcome"] == "finished"


async def test_a_compactions_summary_counts_its_tokens_and_cost_but_no_turn(
    session, agents, settings
):
    """A third-round finding: a compaction's summary is a call of ``FORGE_SMALL_MODEL``
    whose tokens reached no usage row, so budgets and the usage API missed them. It
    counts its tokens and cost (no turn, no step) under the summary's agent and model,
    live and in the rebuilt table alike."""
    from forge import runtime

    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_SMALL_MODEL = "offline/echo"
    settings.FORGE_MODEL_PRICES = {"offline/echo": {"input": 1.0, "output": 2.0}}
    for n in range(3):
        await run(session, f"turn {n} alpha bravo charlie delta echo foxtrot golf hotel")
    before = await sync_to_async(rows)()
    await sync_to_async(runtime.compact)(session=session, wait=True)
    after = await sync_to_async(rows)()
    assert len(after) == len(before) == 1  # the same user, agent, model and day
    (was,), (now,) = before, after
    turns, steps, input_tokens, output_tokens, cost = now[4:9]
    assert (turns, steps) == (was[4], was[5])  # a summary is no turn and no step
    assert input_tokens > was[6]
    assert output_tokens > was[7]
    assert cost > was[8]  # priced as the small model's call
    await sync_to_async(rebuild_usage)()
    assert await sync_to_async(rows)() == after  # the table is the fold of the logs


async def test_an_automatic_compaction_counts_for_the_speaker_whose_turn_ran_it(
    session, user, agents, settings
):
    """QA: the summary of a compaction that a turn runs (the window overflowed) was
    billed to the session's owner, whoever spoke: a teammate's turns in Alice's long
    session spent on Alice's row and her budget, and the teammate's own budget missed
    them. It counts for the turn's speaker, as the turn's replies do (rebuilt alike)."""
    from accounts.models import Membership, User
    from sessions.models import SessionEvent

    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_SMALL_MODEL = "offline/echo"
    settings.FORGE_CONTEXT_LIMIT_DEFAULT = 600
    settings.FORGE_OUTPUT_RESERVE = 50
    settings.FORGE_COMPACT_TAIL_TOKENS = 80
    settings.FORGE_AUTO_COMPACT = True

    def teammate() -> Any:
        mate = User.objects.create_user(username="carol", password="pw-carol-123")
        Membership.objects.create(tenant=session.tenant, user=mate)
        return mate

    carol = await sync_to_async(teammate)()
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"
    for n in range(8):
        started = await start_turn(session=session, text=f"turn {n} {words} {words}", speaker=carol)
        await asyncio.wait_for(started.task, timeout=30)
    compacted = SessionEvent.objects.filter(session=session, type="session.compacted")
    assert await sync_to_async(compacted.exists)(), "the window overflowed: a compaction ran"
    recorded = await sync_to_async(rows)()
    assert {row[0] for row in recorded} == {carol.pk}  # nothing billed to the owner
    await sync_to_async(rebuild_usage)()
    assert await sync_to_async(rows)() == recorded


async def test_a_sessions_title_counts_its_model_call(user, agents, script, settings):
    """A fourth-round finding: the small model's call that titles a new session was billed
    by the provider and counted nowhere (usage, budgets). It counts under the speaker,
    the agent and the small model, no turn, and the rebuild keeps it."""
    from forge.models import SideUsage
    from sessions.models import Session

    settings.FORGE_SMALL_MODEL = "offline/echo"
    script([text_reply("hello there", usage={"input": 12, "output": 2})])
    untitled = await sync_to_async(create_session)(user=user)
    await run(untitled, "plan a trip to Lisbon in May")
    await wait_until(lambda: Session.objects.get(pk=untitled.pk).title)

    def title_rows() -> list[tuple]:
        return [r for r in rows() if r[2] == "offline/echo"]

    await wait_until(lambda: title_rows())
    [title] = await sync_to_async(title_rows)()
    assert title[:3] == (user.pk, "build", "offline/echo")
    assert title[4:6] == (0, 0)  # no turn, no step
    assert title[6] > 0  # its input tokens
    assert await sync_to_async(SideUsage.objects.count)() == 1
    recorded = await sync_to_async(rows)()
    await sync_to_async(rebuild_usage)()
    assert await sync_to_async(rows)() == recorded


def test_an_imported_reply_counts_in_no_turn_metric(session, user, agents):
    """A QA finding: an imported log's open reply is ended (aborted) on import and was
    counted in the turn metrics under the agent and model its log names, which a
    crafted log makes anything: every new name was a new series of every turn metric.
    Names this server does not configure were then counted as ``other``; since the
    import bills nothing (it ran elsewhere: ``test_imported_usage.py``), the ending is
    counted in no series at all."""
    from sessions import selectors, services

    asked = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_message(
        session=session,
        info={
            "role": "assistant",
            "parent_id": asked,
            "agent": "ag-rand0",
            "model": {"provider": "openai", "model": "m-rand0"},
        },
    )
    events = [json.loads(line) for line in selectors.export_lines(session=session)][1:]
    other = {"agent": "other", "model": "other"}
    before = sample("forge_turns_aborted_total", **other)
    services.import_log(user=user, events=events, copy=True)
    assert sample("forge_turns_aborted_total", **other) == before
    assert sample("forge_turns_aborted_total", agent="ag-rand0", model="openai/m-rand0") == 0
    assert sample("forge_reply_seconds_count", agent="ag-rand0", model="openai/m-rand0") == 0
