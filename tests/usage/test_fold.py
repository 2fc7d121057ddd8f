"""The usage rule as pure functions: when a reply counts, and what it adds."""

import datetime as dt
from decimal import Decimal

from forge.usage.fold import (
    Key,
    completes,
    completes_summary,
    fold_log,
    key_of,
    reply_totals,
    summary_totals,
)

OPEN = {
    "id": "msg_b",
    "role": "assistant",
    "created_at": "2026-11-30T23:59:59.500Z",
    "agent": "build",
    "model": {"provider": "offline", "model": "echo"},
    "user_id": 7,
}
DONE = {**OPEN, "completed_at": "2026-12-01T00:00:03.000Z", "finish": "stop"}


def step(part_id, *, tokens, cost):
    return {
        "id": part_id,
        "message_id": "msg_b",
        "type": "step-finish",
        "reason": "stop",
        "tokens": tokens,
        "cost": cost,
    }


def tool(part_id):
    return {"id": part_id, "message_id": "msg_b", "type": "tool", "call_id": part_id}


def test_a_reply_counts_when_it_goes_from_open_to_completed():
    assert completes(OPEN, DONE)
    assert not completes(None, DONE)  # first logged completed: a fork's copy
    assert not completes(DONE, {**DONE, "title": "again"})  # counted once
    assert not completes(OPEN, {**OPEN, "tokens": {"input": 3}})  # still open
    assert not completes({**OPEN, "role": "user"}, {**DONE, "role": "user"})
    # a compaction's summary is logged open then completed, and is no reply: the live
    # count never counted it, and rebuild_usage did (a second-round finding)
    assert not completes({**OPEN, "summary": True}, {**DONE, "summary": True})


def test_the_key_is_the_speaker_agent_model_and_the_utc_day_of_creation():
    assert key_of(DONE, owner_id=1) == Key(7, "build", "offline/echo", dt.date(2026, 11, 30))
    legacy = {k: v for k, v in DONE.items() if k != "user_id"}
    legacy_key = key_of(legacy, owner_id=1)
    assert legacy_key is not None
    assert legacy_key.user_id == 1  # before speakers were logged
    assert key_of(legacy, owner_id=None) is None  # no user known: counts nowhere
    bare = key_of({**DONE, "model": None, "agent": None}, owner_id=1)
    assert bare is not None
    assert (bare.agent, bare.model) == ("", "")


def test_a_reply_adds_its_steps_tokens_cost_tools_and_outcome():
    parts = [
        step("p1", tokens={"input": 10, "output": 2, "cache_read": 4}, cost=0.1),
        tool("p2"),
        tool("p3"),
        step("p4", tokens={"input": 30, "output": 5, "reasoning": 7}, cost=0.2),
        {"id": "p5", "message_id": "msg_b", "type": "text", "text": "hi"},
    ]
    totals = reply_totals(DONE, parts)
    assert (totals.turns, totals.steps, totals.tool_calls) == (1, 2, 2)
    assert totals.tokens == {
        "input": 40,
        "output": 7,
        "reasoning": 7,
        "cache_read": 4,
        "cache_write": 0,
    }
    assert totals.cost == Decimal("0.3")  # exact, not 0.30000000000000004
    assert (totals.failed, totals.aborted) == (0, 0)
    failed = reply_totals({**DONE, "error": {"name": "ProviderError", "message": "503"}}, [])
    assert (failed.failed, failed.aborted) == (1, 0)
    aborted = reply_totals({**DONE, "error": {"name": "MessageAbortedError", "message": "x"}}, [])
    assert (aborted.failed, aborted.aborted) == (0, 1)


def _event(kind, data):
    return {"type": kind, "data": data}


def test_a_log_folds_to_its_completions_and_ignores_copies_and_later_parts():
    events = [
        _event(
            "message.updated", {"id": "msg_a", "role": "user", "created_at": OPEN["created_at"]}
        ),
        _event("message.updated", OPEN),
        _event("part.updated", step("p1", tokens={"input": 10, "output": 2}, cost=0.1)),
        _event("part.updated", tool("p2")),
        _event("part.updated", tool("p9")),
        _event("part.removed", {"part_id": "p9", "message_id": "msg_b"}),
        _event("message.updated", DONE),
        _event("part.updated", step("p3", tokens={"input": 99}, cost=9)),  # after: not counted
        _event("message.updated", {**DONE, "title": "x"}),  # completed again: not counted
        # a fork's copy: logged completed at once
        _event("message.updated", {**DONE, "id": "msg_c"}),
        _event("part.updated", {**step("p4", tokens={"input": 5}, cost=1), "message_id": "msg_c"}),
    ]
    found = fold_log(events, owner_id=1)
    assert len(found) == 1
    key, totals = found[0]
    assert key.user_id == 7
    assert (totals.turns, totals.steps, totals.tool_calls) == (1, 1, 1)
    assert totals.tokens["input"] == 10
    assert totals.cost == Decimal("0.1")


def test_a_removed_message_takes_its_parts_with_it():
    events = [
        _event("message.updated", OPEN),
        _event("part.updated", step("p1", tokens={"input": 10}, cost=0.1)),
        _event("message.removed", {"message_id": "msg_b"}),
        _event("message.updated", OPEN),
        _event("message.updated", DONE),
    ]
    ((_, totals),) = fold_log(events, owner_id=1)
    assert (totals.steps, totals.tokens["input"]) == (0, 0)


def test_a_summary_adds_its_calls_tokens_and_cost_and_no_turn():
    opened = {**OPEN, "summary": True}
    done = {**DONE, "summary": True, "tokens": {"input": 50, "output": 9}, "cost": 0.25}
    assert completes_summary(opened, done)
    assert not completes_summary(None, done)  # a fork's copy
    assert not completes_summary(done, done)  # counted once
    assert not completes(opened, done)
    totals = summary_totals(done)
    assert (totals.turns, totals.steps, totals.tokens["input"], totals.tokens["output"]) == (
        0,
        0,
        50,
        9,
    )
    assert totals.cost == Decimal("0.25")
    events = [
        {"type": "message.updated", "data": opened},
        {"type": "message.updated", "data": done},
    ]
    ((key, folded),) = fold_log(events, owner_id=1)
    assert key.user_id == 7
    assert folded.tokens == totals.tokens
