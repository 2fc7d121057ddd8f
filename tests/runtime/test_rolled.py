"""The rolled cut: the messages long-term memory rolled leave the model's view of the
session (the ``dialog_history`` block's ``rolled_through``), after the compaction
boundary, in every derivation: live, incremental, ``at=``, replay of the log."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from forge.context import request_for, visible_history
from forge.context.blocks import set_block, set_blocks
from forge.context.boundary import record_compaction
from forge.context.compacted import filter_compacted
from forge.context.derived import Derived
from forge.context.incremental import cache, full_request, request_bytes
from forge.context.rolled import cut_among, drop_rolled, rolled_through
from forge.context.visible import read_history
from forge.context.visible import visible_history as full_history
from sessions import selectors

from .test_compacted import ids, reply, user
from .test_context_incremental import turn

# --- the rule, on plain histories ---------------------------------------------------------

OLD = [user("m01"), reply("m02", "m01"), user("m03"), reply("m04", "m03")]


def visible(history: list[Any], through: str | None) -> list[str]:
    return ids(drop_rolled(filter_compacted(history), through))


def test_the_cut_hides_every_message_up_to_the_rolled_one():
    history = [*OLD, user("m05"), reply("m06", "m05")]
    assert visible(history, "m04") == ["m05", "m06"]
    assert visible(history, "m03") == ["m04", "m05", "m06"]  # a reply whose prompt rolled
    assert visible(history, None) == ids(history)
    assert visible(history, "m99") == []


def test_messages_kept_below_the_cut_stay_in_view():
    history = [*OLD, user("m05"), reply("m06", "m05")]
    kept = frozenset({"m03", "m04"})
    assert ids(drop_rolled(filter_compacted(history), "m06", kept)) == ["m03", "m04"]


def info(mid: str, agent: str = "build", user_id: Any = 1, **more: Any) -> dict[str, Any]:
    return {"id": mid, "agent": agent, "user_id": user_id, **more}


def test_the_cut_keeps_other_agents_and_speakers_messages_in_view():
    mine = [info("m01"), info("m02")]
    assert cut_among(mine, start=None, through="m02", kept=[], agent="build", user_id=1) == (
        "m02",
        [],
    )
    mixed = [*mine, info("m03", "explore"), info("m04", "explore"), info("m05", user_id=2)]
    mixed += [info("m06"), info("m07", summary=True, agent="")]  # a summary is nobody's
    assert cut_among(mixed, start=None, through="m07", kept=[], agent="build", user_id=1) == (
        "m07",
        ["m03", "m04", "m05"],
    )
    # No field, no other: a message logged without a speaker or an agent is the core's.
    assert cut_among(
        [{"id": "m01"}], start=None, through="m01", kept=[], agent="build", user_id=1
    ) == ("m01", [])
    # From the cut in force on: its kept ids stand, none above it (a stale list).
    assert cut_among(
        [info("m05", "explore"), info("m06")],
        start="m04",
        through="m06",
        kept=["m03", "m09"],
        agent="build",
        user_id=1,
    ) == ("m06", ["m03", "m05"])
    # Past the limit the cut stops just below the next other message: nothing is lost.
    assert cut_among(
        mixed, start=None, through="m07", kept=[], agent="build", user_id=1, limit=2
    ) == ("m04", ["m03", "m04"])
    assert cut_among(
        [info("m01", "explore")], start=None, through="m01", kept=[], agent="b", user_id=1, limit=0
    ) == (None, [])


def test_a_compaction_that_summarized_a_kept_message_is_never_passed():
    """A review finding (HIGH): another agent's turn (kept in view) summarized by a
    compaction the cut then passed reached the model neither raw nor summarized."""
    history = [user("m01"), reply("m02", "m01"), user("m03"), reply("m04", "m03")]
    history += [user("m05", compaction={"tail_start_id": None}), reply("m06", "m05", summary=True)]
    history += [user("m07"), reply("m08", "m07"), user("m09"), reply("m10", "m09")]
    kept = frozenset({"m03", "m04"})
    assert ids(drop_rolled(filter_compacted(history), "m10", kept)) == ["m05", "m06"]
    # With a tail: kept messages newer than the tail's start stay raw, the boundary goes.
    tailed = [user("m01"), reply("m02", "m01"), user("m03"), reply("m04", "m03")]
    tailed += [user("m05", compaction={"tail_start_id": "m03"})]
    tailed += [reply("m06", "m05", summary=True), user("m07"), reply("m08", "m07")]
    assert ids(drop_rolled(filter_compacted(tailed), "m08", kept)) == ["m03", "m04"]
    # Nothing kept below it: passed, as before.
    assert ids(drop_rolled(filter_compacted(history), "m10")) == []


def test_another_speakers_reply_keeps_the_rolled_prompt_it_answers():
    """A review finding (LOW): another member's regenerated reply to a prompt the core
    rolled was kept in view without its prompt."""
    infos = [info("m01"), info("m02", role="assistant", parent_id="m01", user_id=2)]
    infos += [info("m03"), info("m04", role="assistant", parent_id="m03")]
    assert cut_among(infos, start=None, through="m04", kept=[], agent="build", user_id=1) == (
        "m04",
        ["m01", "m02"],
    )
    # Both count toward the limit: the cut stops below the reply when they do not fit.
    assert cut_among(
        infos, start=None, through="m04", kept=[], agent="build", user_id=1, limit=1
    ) == ("m01", [])


def test_rolling_first_then_a_compaction_of_what_the_cut_left():
    # m01-m04 rolled; a compaction then summarized m05-m06 and kept m07-m08 verbatim.
    history = [*OLD, user("m05"), reply("m06", "m05"), user("m07"), reply("m08", "m07")]
    history += [user("m09", compaction={"tail_start_id": "m07"}), reply("m10", "m09", summary=True)]
    history += [user("m11"), reply("m12", "m11")]
    assert visible(history, "m04") == ["m09", "m10", "m07", "m08", "m11", "m12"]


def test_a_compaction_first_then_a_rolling_past_its_boundary():
    history = [*OLD, user("m05", compaction={"tail_start_id": "m03"})]
    history += [reply("m06", "m05", summary=True), user("m07"), reply("m08", "m07")]
    history += [user("m09"), reply("m10", "m09")]
    # rolled through m08: the boundary (and its kept tail) are behind the cut too
    assert visible(history, "m08") == ["m09", "m10"]
    # rolled through m03, the kept tail's first message: the block holds all that the
    # summary summarized (m01-m02), so the summary leaves too (QA: the model read m01-m02
    # twice, in the compaction's summary and in the block's)
    assert visible(history, "m03") == ["m04", "m07", "m08", "m09", "m10"]
    # rolled through m02 only, short of the tail: the boundary stands
    assert visible(history, "m02") == ["m05", "m06", "m03", "m04", "m07", "m08", "m09", "m10"]
    # no tail kept: the summary leaves once the cut is past its request
    no_tail = [*OLD, user("m05", compaction={"tail_start_id": None})]
    no_tail += [reply("m06", "m05", summary=True), user("m07"), reply("m08", "m07")]
    assert visible(no_tail, "m04") == ["m05", "m06", "m07", "m08"]
    assert visible(no_tail, "m07") == ["m08"]


def test_the_block_in_force_names_the_cut():
    block = {"kind": "dialog_history", "key": "memory", "text": "Summaries"}
    assert rolled_through({}) is None
    assert rolled_through({"dialog_history:memory": block}) is None  # logged before the trim
    for value in (None, "", 7, ["msg_x"]):
        assert rolled_through({"dialog_history:memory": {**block, "rolled_through": value}}) is None
    assert rolled_through({"dialog_history:memory": {**block, "rolled_through": "m04"}}) == "m04"
    other = {"kind": "notes", "key": "memory", "rolled_through": "m04"}
    assert rolled_through({"notes:memory": other}) is None  # only memory's block cuts


# --- from the store: live, incremental, at=, replay ------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_cache(settings: Any) -> None:
    cache.clear()
    settings.FORGE_CONTEXT_VERIFY = False  # the tests below compare themselves


def roll(session: Any, through: str | None, *, text: str = "SUMMARY OF ROLLED TURNS") -> None:
    """Log the ``dialog_history`` block a turn would, rolled through ``through``."""
    set_block(
        session,
        kind="dialog_history",
        key="memory",
        body={"text": text, "slice_ids": ["msl_x"], "rolled_through": through},
    )


def contents(session: Any, at: int | None = None) -> list[str]:
    return [str(m.get("content")) for m in request_for(session, at=at)[1].messages]


def head(session: Any) -> int:
    return selectors.head_seq(tenant=session.tenant, session_id=session.pk)


def assert_every_derivation_agrees(session: Any) -> None:
    live = request_for(session)
    assert request_bytes(live) == request_bytes(full_request(session))
    assert request_bytes(request_for(session, at=head(session))) == request_bytes(live)
    assert visible_history(session) == full_history(session)


def reply_id(session: Any, prompt_id: str) -> str:
    return next(
        item["info"]["id"]
        for item in selectors.iter_history(tenant=session.tenant, session_id=session.pk)
        if item["info"].get("parent_id") == prompt_id
    )


@pytest.mark.django_db
def test_the_block_in_force_cuts_what_the_model_is_sent(session):
    prompts = [turn(session, n) for n in range(4)]
    before = head(session)
    roll(session, reply_id(session, prompts[1]))  # turns 0-1 rolled
    assert contents(session) == ["ask 2", "answer 2", "ask 3", "answer 3"]
    assert "SUMMARY OF ROLLED TURNS" in request_for(session)[1].system
    assert_every_derivation_agrees(session)
    assert contents(session, at=before)[:2] == ["ask 0", "answer 0"]  # before the block
    # the log and /messages/ keep every turn
    page = selectors.message_page(tenant=session.tenant, session_id=session.pk, limit=50)
    assert len(page.items) == 8


@pytest.mark.django_db
def test_a_block_without_rolled_through_cuts_nothing(session):
    for n in range(3):
        turn(session, n)
    set_block(session, kind="dialog_history", key="memory", body={"text": "old style block"})
    assert contents(session)[:2] == ["ask 0", "answer 0"]
    assert_every_derivation_agrees(session)
    roll(session, None)
    assert len(contents(session)) == 6
    assert_every_derivation_agrees(session)


@pytest.mark.django_db
def test_another_speaker_brings_their_cut_or_none(session):
    prompts = [turn(session, n) for n in range(4)]
    roll(session, reply_id(session, prompts[2]), text="alice's summaries")
    alices = head(session)
    assert contents(session) == ["ask 3", "answer 3"]
    # carol speaks: her memory rolled less of this session
    roll(session, reply_id(session, prompts[0]), text="carol's summaries")
    assert contents(session) == ["ask 1", "answer 1", "ask 2", "answer 2", "ask 3", "answer 3"]
    assert request_for(session)[1].system == ["carol's summaries"]
    assert_every_derivation_agrees(session)
    # dave has no memory: the block is removed, and so is the cut
    set_blocks(session, [{"kind": "dialog_history", "key": "memory", "removed": True}])
    assert len(contents(session)) == 8
    assert_every_derivation_agrees(session)
    # replay still shows what alice's turn saw
    assert contents(session, at=alices) == ["ask 3", "answer 3"]


@pytest.mark.django_db
def test_rolling_then_compaction_from_the_store(session):
    prompts = [turn(session, n) for n in range(4)]
    roll(session, reply_id(session, prompts[1]))
    record_compaction(
        session, summary="COMPACTED", auto=False, overflow=False, tail_start_id=prompts[3],
        model="x/y",
    )  # fmt: skip
    turn(session, 4)
    assert contents(session) == [
        "What did we do so far? Summarize the conversation for continuing it.",
        "COMPACTED",
        "ask 3",
        "answer 3",
        "ask 4",
        "answer 4",
    ]
    assert_every_derivation_agrees(session)


@pytest.mark.django_db
def test_compaction_then_a_rolling_past_the_boundary_from_the_store(session):
    prompts = [turn(session, n) for n in range(3)]
    record_compaction(
        session, summary="COMPACTED", auto=False, overflow=False, tail_start_id=prompts[2],
        model="x/y",
    )  # fmt: skip
    later = [turn(session, n) for n in range(3, 6)]
    assert "COMPACTED" in contents(session)
    roll(session, reply_id(session, later[1]))  # rolled through turn 4: past the boundary
    assert contents(session) == ["ask 5", "answer 5"]
    assert_every_derivation_agrees(session)
    # the live read starts at the cut: nothing older is read
    history, start = read_history(session, reply_id(session, later[1]))
    assert start == reply_id(session, later[1])
    assert len(history) == 3  # the rolled reply itself, and turn 5
    # rolled into the kept tail: all the summary summarized is rolled, and it leaves too
    roll(session, prompts[2])
    assert contents(session) == ["answer 2", "ask 3", "answer 3", "ask 4", "answer 4", "ask 5",
                                 "answer 5"]  # fmt: skip
    assert_every_derivation_agrees(session)
    # rolled short of the kept tail: the boundary stands
    roll(session, prompts[1])
    assert contents(session)[1:] == ["COMPACTED", "ask 2", "answer 2", "ask 3", "answer 3",
                                     "ask 4", "answer 4", "ask 5", "answer 5"]  # fmt: skip
    assert_every_derivation_agrees(session)


@pytest.mark.django_db
def test_the_cache_folds_a_cut_moving_forward_and_falls_back_when_it_moves_back(session):
    prompts = [turn(session, n) for n in range(6)]
    request_for(session)
    roll(session, reply_id(session, prompts[1]))
    with CaptureQueriesContext(connection) as queries:
        assert contents(session) == [f"{w} {n}" for n in range(2, 6) for w in ("ask", "answer")]
    assert len(queries) == 1  # folded: only the new events read
    assert not [key for key in cache.stats if "fallback" in key or "full" in key]
    assert_every_derivation_agrees(session)
    roll(session, reply_id(session, prompts[3]))
    turn(session, 6)
    assert contents(session) == ["ask 4", "answer 4", "ask 5", "answer 5", "ask 6", "answer 6"]
    assert not [key for key in cache.stats if "fallback" in key]
    assert_every_derivation_agrees(session)
    roll(session, reply_id(session, prompts[0]))  # back: another speaker's memory
    assert contents(session)[:2] == ["ask 1", "answer 1"]
    assert cache.stats["fallback:rolled cut moved back"] == 1
    assert_every_derivation_agrees(session)
    # a state seeded at a cut reads from it
    cache.clear()
    roll(session, reply_id(session, prompts[4]))
    seeded = Derived.seed(session)
    assert seeded.start == seeded.through == reply_id(session, prompts[4])
    assert len(seeded) == 1 + 4  # the rolled reply itself, turns 5 and 6


@pytest.mark.django_db
def test_a_reply_behind_the_cut_is_hidden_its_regenerated_successor_is_not(session):
    first = turn(session, 0)
    turn(session, 1)
    request_for(session)
    turn(session, 2, parent=first)  # the newest reply to the first prompt
    roll(session, reply_id(session, first))  # the older reply: the newer one is not rolled
    assert contents(session) == ["ask 1", "answer 1", "answer 2"]
    assert_every_derivation_agrees(session)


@pytest.mark.django_db
def test_the_admin_page_counts_the_rolled_messages(admin_client, session):
    from django.urls import reverse

    prompts = [turn(session, n) for n in range(3)]
    url = reverse("admin:forge_sessions_session_context", args=[session.pk])
    assert "<strong>0 rolled</strong>" in admin_client.get(url).text
    through = reply_id(session, prompts[1])
    roll(session, through)
    page = admin_client.get(url)
    assert "2 of 6 messages reach the model" in page.text
    assert "<strong>0 hidden</strong>" in page.text
    assert "<strong>4 rolled</strong>" in page.text
    assert through in page.text
    assert "ask 1" not in page.text
    assert "ask 2" in page.text


@pytest.mark.django_db
def test_a_new_memory_block_makes_the_last_steps_usage_stale(session):
    from forge.runtime.steps import _last_usage

    turn(session, 0)  # its step-finish reported {input: 1, output: 1}
    assert _last_usage(session) is not None
    set_block(session, kind="notes", key="k", body={"text": "not memory"})
    assert _last_usage(session) is not None  # another block: the usage still stands
    roll(session, None)  # a dialog_history block after the step: what it measured changed
    assert _last_usage(session) is None
    tokens = selectors.last_step_tokens(tenant=session.tenant, session=session)
    assert tokens is not None  # the store's rule alone ignores blocks
    assert (tokens["input"], tokens["output"]) == (1, 1)
    turn(session, 1)  # a step after the block: its usage counts
    assert _last_usage(session) is not None


def step_starts(session: Any) -> list[int]:
    from sessions.models import SessionEvent

    return list(
        SessionEvent.objects.filter(
            session=session, type="part.updated", data__type="step-start"
        ).values_list("seq", flat=True)
    )


def seen_at(session: Any, at: int) -> tuple[list[str], list[str]]:
    request = request_for(session, at=at)[1]
    return [str(m.get("content")) for m in request.messages], list(request.system)


@pytest.mark.django_db
def test_a_forks_copied_steps_replay_the_blocks_of_their_time(session, user):
    """QA (MEDIUM): a fork logged the fold of all the source's context updates once,
    before the copied history, so replaying a copied step (``at=`` its step-start, as
    ``replay_session`` does) showed today's memory block and cut: a request no model
    was sent. The fork writes each update where it was among the messages it copies."""
    from sessions import services

    prompts = [turn(session, 0), turn(session, 1)]
    roll(session, reply_id(session, prompts[0]), text="SUMMARY A")
    prompts += [turn(session, 2), turn(session, 3)]
    roll(session, reply_id(session, prompts[2]), text="SUMMARY B")
    prompts.append(turn(session, 4))
    fork = services.fork_session(
        session=session, user=user, before_message_id=reply_id(session, prompts[4])
    )
    source, copied = step_starts(session), step_starts(fork)
    assert len(copied) == 4  # turns 0-3; turn 4's prompt is copied without its reply
    for at_source, at_fork in zip(source, copied, strict=False):
        assert seen_at(fork, at_fork) == seen_at(session, at_source)
    assert seen_at(fork, copied[1]) == (["ask 0", "answer 0", "ask 1"], [])
    assert seen_at(fork, copied[2])[1] == ["SUMMARY A"]
    # the fork's next turn sees the source's blocks as they are now, cut in its own ids
    assert contents(fork) == ["ask 3", "answer 3", "ask 4"]
    assert request_for(fork)[1].system == ["SUMMARY B"]
    assert_every_derivation_agrees(fork)
