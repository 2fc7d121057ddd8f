"""filter_compacted: summary boundaries cut what the model sees, never the log."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from forge.context import request_for, visible_history
from forge.context.boundary import record_compaction
from forge.context.compacted import filter_compacted
from forge.context.visible import visible_history as read_visible_history
from sessions import selectors, services

DONE = "2026-11-30T00:00:01.000Z"


def user(mid, text="hi", *, compaction=None):
    parts = [{"id": f"p{mid}", "type": "text", "text": text}]
    if compaction is not None:
        parts = [{"id": f"p{mid}", "type": "compaction", "auto": True, **compaction}]
    return {"info": {"id": mid, "role": "user"}, "parts": parts}


def reply(mid, parent, text="ok", **info):
    base = {"id": mid, "role": "assistant", "parent_id": parent, "completed_at": DONE}
    return {"info": {**base, **info}, "parts": [{"id": f"p{mid}", "type": "text", "text": text}]}


def ids(history):
    return [item["info"]["id"] for item in history]


OLD = [user("m01"), reply("m02", "m01"), user("m03"), reply("m04", "m03")]


def test_no_boundary_keeps_everything():
    assert ids(filter_compacted(OLD)) == ids(OLD)


def test_a_finished_summary_cuts_the_older_history():
    history = [*OLD, user("m05", compaction={}), reply("m06", "m05", summary=True)]
    history += [user("m07"), reply("m08", "m07")]
    assert ids(filter_compacted(history)) == ["m05", "m06", "m07", "m08"]


@pytest.mark.parametrize(
    "broken",
    [
        {"error": {"name": "APIError", "message": "boom", "retryable": False}},  # failed
        {"completed_at": None},  # unfinished
        {"completed_at": DONE, "error": {"name": "MessageAbortedError", "message": "x"}},  # aborted
    ],
)
def test_a_failed_aborted_or_unfinished_summary_never_cuts(broken):
    history = [*OLD, user("m05", compaction={}), reply("m06", "m05", summary=True, **broken)]
    assert ids(filter_compacted(history)) == ids(history)


def test_a_summary_without_a_compaction_parent_is_no_boundary():
    history = [*OLD, user("m05"), reply("m06", "m05", summary=True)]
    assert ids(filter_compacted(history)) == ids(history)


def test_a_failed_newer_summary_falls_back_to_the_older_boundary():
    history = [*OLD, user("m05", compaction={}), reply("m06", "m05", summary=True)]
    history += [user("m07"), reply("m08", "m07")]
    history += [user("m09", compaction={}), reply("m10", "m09", summary=True, completed_at=None)]
    assert ids(filter_compacted(history)) == ["m05", "m06", "m07", "m08", "m09", "m10"]


def test_the_kept_tail_stays_visible_after_the_summary():
    history = [*OLD, user("m05", compaction={"tail_start_id": "m03"})]
    history += [reply("m06", "m05", summary=True), user("m07"), reply("m08", "m07")]
    assert ids(filter_compacted(history)) == ["m05", "m06", "m03", "m04", "m07", "m08"]


def test_the_newest_boundary_wins():
    history = [*OLD, user("m05", compaction={}), reply("m06", "m05", summary=True)]
    history += [user("m07"), reply("m08", "m07")]
    history += [user("m09", compaction={"tail_start_id": "m07"})]
    history += [reply("m10", "m09", summary=True)]
    assert ids(filter_compacted(history)) == ["m09", "m10", "m07", "m08"]


# --- from the store -------------------------------------------------------------------


def _turn(session, n):
    uid = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": uid, "type": "text", "text": f"question {n}"}
    )
    aid = services.update_message(
        session=session, info={"role": "assistant", "parent_id": uid, "completed_at": DONE}
    ).data["id"]
    services.update_part(
        session=session, part={"message_id": aid, "type": "text", "text": f"answer {n}"}
    )
    return uid


@pytest.mark.django_db
def test_request_for_honours_the_boundary_and_at(session):
    for n in range(3):
        _turn(session, n)
    before = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
    record_compaction(
        session, summary="SUMMARY", auto=False, overflow=False, tail_start_id=None, model="x/y"
    )
    last = _turn(session, 3)
    _, request = request_for(session)
    contents = [m["content"] for m in request.messages]
    assert "SUMMARY" in contents
    assert "question 0" not in contents
    assert contents[-2:] == ["question 3", "answer 3"]
    # as of a seq before the compaction, the whole history
    _, then = request_for(session, at=before)
    assert [m["content"] for m in then.messages][:2] == ["question 0", "answer 0"]
    # /messages/ still returns every turn
    page = selectors.message_page(tenant=session.tenant, session_id=session.pk)
    assert len(page.items) == 10
    assert last in ids(page.items)


@pytest.mark.django_db
def test_a_kept_tail_read_from_the_store(session):
    first = _turn(session, 0)
    second = _turn(session, 1)
    assert first < second
    record_compaction(
        session, summary="S", auto=True, overflow=True, tail_start_id=second, model="x/y"
    )
    contents = [m["content"] for m in request_for(session)[1].messages]
    assert contents[1:] == ["S", "question 1", "answer 1"]


@pytest.mark.django_db
def test_at_beyond_the_log_or_negative_is_refused(session):
    from sessions.exceptions import InvalidCursor

    _turn(session, 0)
    head = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
    with pytest.raises(InvalidCursor):
        request_for(session, at=head + 1)
    with pytest.raises(InvalidCursor):
        request_for(session, at=-1)


@pytest.mark.django_db
def test_the_read_starts_at_the_boundary(session):
    for n in range(150):
        _turn(session, n)
    record_compaction(
        session, summary="S", auto=False, overflow=False, tail_start_id=None, model="x/y"
    )
    _turn(session, 150)
    with CaptureQueriesContext(connection) as queries:
        visible = read_visible_history(session)  # the full read (what a cache miss does)
    assert len(visible) == 4
    # marker + session + one batch of messages + its parts: not growing with the 300 older
    assert len(queries) <= 5


# --- pruning ----------------------------------------------------------------------------


def _tool_turn(session, n, output):
    uid = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": uid, "type": "text", "text": f"read {n}"}
    )
    aid = services.update_message(
        session=session, info={"role": "assistant", "parent_id": uid, "completed_at": DONE}
    ).data["id"]
    services.update_part(session=session, part={"message_id": aid, "type": "step-start"})
    return services.update_part(
        session=session,
        part={
            "message_id": aid,
            "type": "tool",
            "call_id": f"c{n}",
            "tool": "read_file",
            "state": {
                "status": "completed",
                "input": {"path": f"f{n}.txt"},
                "output": output,
                "title": "",
                "metadata": {},
                "time": {"start": DONE, "end": DONE},
            },
        },
    ).data


@pytest.mark.django_db
def test_old_tool_outputs_are_pruned_by_a_logged_update_and_the_log_keeps_them(session, settings):
    from forge.context.pruning import prune

    settings.FORGE_PRUNE_PROTECT_TOKENS = 100
    settings.FORGE_PRUNE_MINIMUM_TOKENS = 100
    big = "x" * 1000  # 250 tokens
    parts = [_tool_turn(session, n, f"OUTPUT{n} {big}") for n in range(5)]
    pruned = prune(session, visible_history(session))
    # the last two turns are protected; older outputs count against the 100-token budget
    # (each is 250), so every completed output older than the last two turns is pruned
    assert pruned == [parts[2]["id"], parts[1]["id"], parts[0]["id"]]
    tool_messages = [m for m in request_for(session)[1].messages if m["role"] == "tool"]
    assert tool_messages[0]["content"].startswith("[the output of the read_file call")
    assert parts[0]["id"] in tool_messages[0]["content"]
    assert tool_messages[-1]["content"].startswith("OUTPUT4")
    # the stored output is unchanged; the log has the marking update
    stored = selectors.get_message(
        tenant=session.tenant, session_id=session.pk, message_id=parts[0]["message_id"]
    )["parts"][-1]
    assert stored["state"]["output"].startswith("OUTPUT0")
    assert stored["state"]["time"]["compacted"]
    assert prune(session, visible_history(session)) == []  # nothing new to prune


@pytest.mark.django_db
def test_nothing_is_pruned_below_the_minimum(session, settings):
    from forge.context.pruning import prune

    settings.FORGE_PRUNE_PROTECT_TOKENS = 10
    settings.FORGE_PRUNE_MINIMUM_TOKENS = 10_000
    for n in range(5):
        _tool_turn(session, n, "y" * 400)
    assert prune(session, visible_history(session)) == []
