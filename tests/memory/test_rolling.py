"""DialogRolling: increments, ranges, keep-K, idle rolling, re-checks, failures, consumers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import after_rolling, selectors, services
from memory.exceptions import InvalidInput, InvalidRollingOption, NotFound
from memory.models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from memory.rolling import RollingOptions, RollOutcome, candidate_core_ids, roll, take_snapshot
from memory.times import now_ms

from . import summarizers
from .conftest import options, roll_committed, talk, turn

pytestmark = pytest.mark.django_db


def fresh(core: MemoryCore) -> MemoryCore:
    return MemoryCore.objects.get(pk=core.pk)


def window_texts(core: MemoryCore) -> list[str]:
    return list(
        DialogueMessage.objects.filter(core=core).order_by("seq").values_list("text", flat=True)
    )


def unit_texts(unit: MemoryUnit) -> list[str]:
    return list(
        MemoryMessage.objects.filter(unit=unit).order_by("index").values_list("text", flat=True)
    )


def all_texts(turns: range) -> list[str]:
    return [m["text"] for i in turns for m in turn(i)]


def assert_window_is_what_no_unit_holds(core: MemoryCore) -> None:
    """The invariant after a rolling: the window is the run of seqs [rolled_seq, next)."""
    core = fresh(core)
    assert core.rolled_seq == core.window_next_seq - core.window_count
    seqs = list(
        DialogueMessage.objects.filter(core=core).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(core.rolled_seq, core.window_next_seq))


def legacy_window(core: MemoryCore) -> None:
    """A core rolled under the old rule, which rolled the whole window and kept its last 2
    messages in it (already rolled): roll with keep 0, then put those 2 back."""
    roll_committed(core, options=options(keep=0))
    core = fresh(core)
    last = list(
        MemoryMessage.objects.filter(unit__core=core)
        .order_by("-index")[:2]
        .values_list("role", "text", "at")
    )[::-1]
    DialogueMessage.objects.bulk_create(
        DialogueMessage(
            tenant=core.tenant,
            core=core,
            seq=core.window_next_seq - 2 + i,
            role=role,
            text=text,
            at=at,
        )
        for i, (role, text, at) in enumerate(last)
    )
    MemoryCore.objects.filter(pk=core.pk).update(window_count=2)


def make_idle(core: MemoryCore, seconds: float = 3600) -> None:
    MemoryCore.objects.filter(pk=core.pk).update(
        last_interaction_at=now_ms() - timedelta(seconds=seconds)
    )


# --- options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0},
        {"threshold": -3},
        {"threshold": "5"},
        {"keep": -1},
        {"idle_after": 0},
        {"idle_after": -1},
        {"idle_after": "soon"},
    ],
)
def test_bad_options_are_refused(kwargs):
    with pytest.raises(InvalidRollingOption) as info:
        RollingOptions.build(**kwargs)
    assert info.value.code == "invalid_rolling_option"


def test_options_default_to_settings_and_keep_stays_under_the_threshold(settings):
    settings.FORGE_MEMORY_ROLL_THRESHOLD = 10
    settings.FORGE_MEMORY_ROLL_KEEP = 30
    settings.FORGE_MEMORY_IDLE_AFTER = 90.0
    built = RollingOptions.build()
    assert (built.threshold, built.keep, built.idle_after) == (10, 9, timedelta(seconds=90))


# --- the threshold trigger --------------------------------------------------------------------


def test_under_the_threshold_nothing_happens(talker):
    core = talker(turns=2)  # 4 messages, threshold 6
    assert roll_committed(core).status == "not_due"
    assert not MemoryUnit.objects.exists()


def test_a_rolling_appends_the_increment_and_a_slice_covering_exactly_it(talker):
    core = talker(turns=3)  # 6 messages, keep 2
    outcome = roll_committed(core)
    assert (outcome.status, outcome.trigger, outcome.messages) == ("rolled", "threshold", 4)
    unit = MemoryUnit.objects.get(core=core)
    assert unit.memory_session_id == core.memory_session_id
    assert unit_texts(unit) == all_texts(range(2))
    [item] = MemorySlice.objects.filter(unit=unit)
    assert (item.start_index, item.end_index) == (0, 4)
    assert item.summary.startswith("user: Question 0 about topic0.")
    assert (outcome.unit_id, outcome.slice_id) == (unit.pk, item.pk)
    # keep-K: the 2 most recent messages stay in the window NOT rolled (no unit holds
    # them), so the model can see them verbatim next to the summary, never both.
    core = fresh(core)
    assert window_texts(core) == all_texts(range(3))[-2:]
    assert (core.window_count, core.rolled_seq, core.window_next_seq) == (2, 4, 6)
    assert outcome.trimmed == 4
    assert_window_is_what_no_unit_holds(core)


def test_successive_rollings_make_adjacent_slices_and_never_repeat_a_message(talker):
    core = talker(turns=3)
    roll_committed(core)  # rolls turns 0-1, keeps turn 2 unrolled
    talk(tenant=core.tenant, user=core.user, turns=2, first=3)  # window: 2 kept + 4 new = 6
    second = roll_committed(core)
    assert (second.status, second.messages) == ("rolled", 4)  # turns 2-3: the kept come first
    assert_window_is_what_no_unit_holds(core)
    talk(tenant=core.tenant, user=core.user, turns=3, first=5)  # 2 kept + 6 new
    third = roll_committed(core)
    assert third.messages == 6
    unit = MemoryUnit.objects.get(core=core)
    assert unit_texts(unit) == all_texts(range(7))
    ranges = list(
        MemorySlice.objects.filter(unit=unit)
        .order_by("created_at")
        .values_list("start_index", "end_index")
    )
    assert ranges == [(0, 4), (4, 8), (8, 14)]
    assert (unit.message_count, unit.slice_count) == (14, 3)
    assert window_texts(core) == all_texts(range(8))[-2:]
    assert_window_is_what_no_unit_holds(core)


def test_the_increment_is_what_no_unit_holds_yet_but_the_newest_keep(talker):
    core = talker(turns=3)
    roll_committed(core)
    talk(tenant=core.tenant, user=core.user, turns=1, first=3)
    snap = take_snapshot(core.pk, options=options(), now=now_ms(), force=True)
    assert not isinstance(snap, RollOutcome)
    assert [m.text for m in snap.increment] == all_texts(range(2, 3))
    assert snap.trimmed == 2
    idle = take_snapshot(core.pk, options=options(idle_after=1), now=now_ms() + timedelta(hours=1))
    assert not isinstance(idle, RollOutcome)
    assert [m.text for m in idle.increment] == all_texts(range(2, 4))  # idle: all of it


def test_a_rolling_with_nothing_to_roll_beyond_keep_is_not_due(tenant, talker):
    core = talker(turns=1)  # 2 messages
    outcome = services.roll_core(tenant=tenant, core=core, keep=2)  # manual: keeps both
    assert (outcome.status, outcome.trigger) == ("not_due", "manual")
    assert roll_committed(core, force=True, dry_run=True).status == "not_due"
    assert not MemoryUnit.objects.exists()
    assert (fresh(core).window_count, fresh(core).rolled_seq) == (2, 0)


def test_rolling_again_is_idempotent(talker):
    core = talker(turns=3)
    roll_committed(core)
    assert roll_committed(core).status == "not_due"
    assert roll_committed(core, force=True).status == "not_due"  # nothing new
    assert MemorySlice.objects.count() == 1


def test_a_lowered_keep_rolls_more_of_the_kept_messages(talker):
    core = talker(turns=3)
    roll_committed(core, options=options(keep=4))  # rolls turn 0, keeps 4 unrolled
    outcome = roll_committed(core, options=options(threshold=3, keep=2))
    assert (outcome.status, outcome.messages, outcome.trimmed) == ("rolled", 2, 2)
    assert window_texts(core) == all_texts(range(2, 3))
    assert unit_texts(MemoryUnit.objects.get(core=core)) == all_texts(range(2))
    assert MemorySlice.objects.count() == 2
    assert_window_is_what_no_unit_holds(core)


@pytest.mark.parametrize(("keep", "rolled"), [(1, 4), (3, 2), (5, 0)])
def test_an_odd_keep_keeps_the_whole_turn_of_its_oldest_message(talker, keep, rolled):
    """keep = 1 of u0 a0 u1 a1 u2 a2 would keep a2 alone, its prompt u2 rolled: the
    cutoff moves back to u2, and the slice never holds a question without its answer."""
    core = talker(turns=3)
    outcome = roll_committed(core, options=options(keep=keep))
    if not rolled:
        assert outcome.status == "not_due"  # only whole turns: keep 5 keeps all three
        return
    assert (outcome.status, outcome.messages) == ("rolled", rolled)
    assert window_texts(core) == all_texts(range(3))[rolled:]
    assert_window_is_what_no_unit_holds(core)


def test_a_window_kept_by_the_old_rule_is_trimmed_by_the_next_rolling(talker):
    core = talker(turns=3)
    legacy_window(core)  # the window holds 2 messages already in the unit
    talk(tenant=core.tenant, user=core.user, turns=2, first=3)  # + 4 new: 6, due
    outcome = roll_committed(core)
    assert (outcome.status, outcome.messages, outcome.trimmed) == ("rolled", 2, 4)
    assert unit_texts(MemoryUnit.objects.get(core=core)) == all_texts(range(4))
    assert window_texts(core) == all_texts(range(4, 5))
    assert_window_is_what_no_unit_holds(core)


def test_forcing_rolls_under_the_threshold(tenant, talker):
    core = talker(turns=1)
    outcome = services.roll_core(tenant=tenant, core=core, keep=0)
    assert (outcome.status, outcome.trigger, outcome.messages) == ("rolled", "manual", 2)
    assert fresh(core).window_count == 0


# --- the idle trigger -------------------------------------------------------------------------


def test_idle_rolls_everything_and_starts_a_new_memory_session(talker):
    core = talker(turns=2)  # under the threshold
    make_idle(core)
    outcome = roll_committed(core)
    assert (outcome.status, outcome.trigger, outcome.messages) == ("rolled", "idle", 4)
    after = fresh(core)
    assert after.window_count == 0
    assert not window_texts(after)
    assert after.memory_session_id != core.memory_session_id
    assert outcome.memory_session_id == after.memory_session_id
    first_unit = MemoryUnit.objects.get(core=core)
    assert first_unit.memory_session_id == core.memory_session_id
    # The next dialogue starts a new unit.
    talk(tenant=core.tenant, user=core.user, turns=3, first=10)
    roll_committed(core)
    units = list(MemoryUnit.objects.filter(core=core).order_by("id"))
    assert [u.memory_session_id for u in units] == [
        core.memory_session_id,
        after.memory_session_id,
    ]
    assert unit_texts(units[1]) == all_texts(range(10, 12))
    assert list(
        MemorySlice.objects.filter(unit=units[1]).values_list("start_index", "end_index")
    ) == [(0, 4)]
    assert_window_is_what_no_unit_holds(core)


def test_idle_after_a_threshold_rolling_rolls_the_kept_messages(talker):
    core = talker(turns=3)
    roll_committed(core)
    make_idle(core)
    outcome = roll_committed(core)
    assert (outcome.status, outcome.trigger, outcome.messages, outcome.trimmed) == (
        "rolled",
        "idle",
        2,
        2,
    )
    assert fresh(core).window_count == 0
    assert fresh(core).memory_session_id != core.memory_session_id
    assert unit_texts(MemoryUnit.objects.get(core=core)) == all_texts(range(3))
    assert_window_is_what_no_unit_holds(core)


def test_idle_empties_a_window_kept_by_the_old_rule_without_a_slice(talker):
    core = talker(turns=3)
    legacy_window(core)
    make_idle(core)
    outcome = roll_committed(core)
    assert (outcome.status, outcome.trigger, outcome.messages, outcome.trimmed) == (
        "rolled",
        "idle",
        0,
        2,
    )
    assert outcome.slice_id is None
    assert fresh(core).window_count == 0
    assert fresh(core).memory_session_id != core.memory_session_id
    assert MemorySlice.objects.count() == 1


def test_candidates_are_the_cores_over_the_threshold_or_idle(tenant, user, talker):
    over = talker(agent="over", turns=3)
    under = talker(agent="under", turns=1)
    idle = talker(agent="idle", turns=1)
    make_idle(idle)
    empty_idle = talker(agent="empty", turns=3)
    roll_committed(empty_idle, options=options(keep=0))  # the window is empty
    make_idle(empty_idle)
    found = candidate_core_ids(options=options(), now=now_ms())
    assert found == sorted([over.pk, idle.pk])
    assert under.pk not in found


def test_the_candidate_query_uses_the_partial_indexes(talker):
    talker(turns=3)
    with CaptureQueriesContext(connection) as queries:
        candidate_core_ids(options=options(), now=now_ms())
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # a tiny table: make the planner show its options
            cursor.execute("SET LOCAL enable_seqscan = off")
        for query in queries.captured_queries:
            prefix = "EXPLAIN " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
            cursor.execute(prefix + query["sql"])
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert "memorycore_window" in plan or "memorycore_idle" in plan, plan


# --- re-checks and failures -------------------------------------------------------------------


@pytest.fixture
def inline_summarizer(settings: Any) -> None:
    """Summarizers run on this thread, so they see (and write in) the test's transaction."""
    settings.FORGE_MEMORY_SUMMARIZER_TIMEOUT = 0


def test_a_dialogue_that_moved_while_summarizing_still_rolls_its_snapshot(
    talker, inline_summarizer
):
    core = talker(turns=3)

    def chatty(messages: Any) -> str:
        talk(tenant=core.tenant, user=core.user, turns=1, first=50)  # a turn arrives meanwhile
        return "summary"

    outcome = roll_committed(core, summarizer=chatty)
    assert (outcome.status, outcome.messages) == ("rolled", 4)
    after = fresh(core)
    assert after.rolled_seq == 4
    assert after.window_next_seq == 8
    # the 2 kept unrolled + the 2 that arrived: the next rolling takes them.
    assert window_texts(after) == all_texts(range(3))[-2:] + all_texts(range(50, 51))
    assert unit_texts(MemoryUnit.objects.get(core=core)) == all_texts(range(2))
    assert_window_is_what_no_unit_holds(core)


def test_an_idle_core_whose_user_came_back_is_skipped(talker, inline_summarizer):
    core = talker(turns=2)
    make_idle(core)

    def interrupted(messages: Any) -> str:
        talk(tenant=core.tenant, user=core.user, turns=1, first=9)
        return "summary"

    outcome = roll_committed(core, summarizer=interrupted)
    assert outcome.status == "changed"
    assert not MemoryUnit.objects.exists()
    assert fresh(core).window_count == 6


def test_a_core_rolled_by_someone_else_meanwhile_is_skipped(talker, inline_summarizer):
    core = talker(turns=3)

    def racing(messages: Any) -> str:
        # Another roller commits first (same snapshot, its own summary).
        MemoryCore.objects.filter(pk=core.pk).update(rolled_seq=6)
        return "mine"

    assert roll_committed(core, summarizer=racing).status == "changed"
    assert not MemorySlice.objects.exists()


@pytest.mark.parametrize(
    ("summarizer", "code"),
    [
        (summarizers.failing, "summarizer_failed"),
        (summarizers.empty, "summarizer_empty"),
        (summarizers.not_a_string, "summarizer_empty"),
    ],
)
def test_a_failing_summarizer_leaves_the_core_untouched(talker, summarizer, code):
    core = talker(turns=3)
    outcome = roll_committed(core, summarizer=summarizer)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error["code"] == code
    assert fresh(core).window_count == 6
    assert fresh(core).rolled_seq == 0
    assert not MemoryUnit.objects.exists()
    assert not MemorySlice.objects.exists()


def test_a_summarizer_that_times_out_leaves_the_core_untouched(talker, settings):
    settings.FORGE_MEMORY_SUMMARIZER_TIMEOUT = 0.2
    core = talker(turns=3)
    outcome = roll_committed(core, summarizer=summarizers.slow)
    assert outcome.error == {
        "code": "summarizer_timeout",
        "message": "the summarizer did not answer within 0.2 s",
    }
    assert not MemoryUnit.objects.exists()
    assert fresh(core).window_count == 6


def test_the_summarizer_sees_the_compressed_increment(talker, tenant, user):
    core = services.append_dialogue(
        tenant=tenant,
        user=user,
        agent="build",
        messages=[
            {"role": "user", "text": "  look at this  "},
            {"role": "reasoning", "text": "thinking…"},
            {"role": "tool", "text": "y" * 10_000},
            {"role": "tool", "text": "z"},
            {"role": "assistant", "text": "done"},
            {"role": "assistant", "text": "really"},
        ],
    )
    seen: list[Any] = []

    def spy(messages: Any) -> str:
        seen.extend(messages)
        return "s"

    roll_committed(core, summarizer=spy, options=options(keep=0))
    assert [m["role"] for m in seen] == ["user", "tool", "assistant"]
    assert seen[0]["text"] == "look at this"
    assert len(seen[1]["text"]) < 2100
    assert seen[1]["text"].endswith("z")
    assert seen[2]["text"] == "done\n\nreally"
    # The unit keeps the raw messages, reasoning included.
    assert MemoryMessage.objects.filter(unit__core=core).count() == 6


# --- after rolling ----------------------------------------------------------------------------


def test_consumers_run_after_commit_isolated(talker, caplog):
    core = talker(turns=3)
    seen: list[after_rolling.RollingResult] = []

    def broken(result: after_rolling.RollingResult) -> None:
        raise RuntimeError("consumer bug")

    after_rolling.register(broken)
    after_rolling.register(seen.append)
    after_rolling.register(seen.append)  # once only
    try:
        outcome = roll_committed(core)
    finally:
        after_rolling.unregister(broken)
        after_rolling.unregister(seen.append)
    assert outcome.status == "rolled"
    [result] = seen
    assert result.core_id == core.pk
    assert result.trigger == "threshold"
    assert result.slice["id"] == outcome.slice_id == result.slice_id
    assert (result.slice["start_index"], result.slice["end_index"]) == (0, 4)
    assert [m["text"] for m in result.messages] == all_texts(range(2))
    block = selectors.dialog_history_block(tenant=core.tenant, core=fresh(core))
    assert block is not None
    assert block["kind"] == "dialog_history"
    assert block["key"] == "memory"
    assert block["slice_ids"] == [outcome.slice_id]
    assert result.unit_id == outcome.unit_id
    assert result.trimmed == 4
    assert "consumer bug" in caplog.text
    assert "broken" in caplog.text
    # The built-in consumer indexed the slice.
    assert MemorySlice.objects.get(pk=outcome.slice_id).indexed


def test_consumers_do_not_run_when_the_transaction_rolls_back(talker):
    core = talker(turns=3)
    seen: list[Any] = []
    after_rolling.register(seen.append)
    try:
        roll(core.pk, options=options())  # the test's transaction never commits
    finally:
        after_rolling.unregister(seen.append)
    assert seen == []


def test_register_refuses_what_cannot_be_called():
    with pytest.raises(TypeError):
        after_rolling.register("not callable")  # type: ignore[arg-type]


# --- the dialog_history block -----------------------------------------------------------------


def test_dialog_history_block_holds_the_recent_summaries(tenant, talker, settings):
    core = talker(turns=3)
    assert selectors.dialog_history_block(tenant=tenant, core=core) is None
    roll_committed(core)
    talk(tenant=tenant, user=core.user, turns=2, first=3)
    roll_committed(core)
    block = selectors.dialog_history_block(tenant=tenant, core=core)
    assert block is not None
    slices = list(MemorySlice.objects.order_by("created_at"))
    assert block["kind"] == "dialog_history"
    assert block["key"] == "memory"
    assert block["slice_ids"] == [s.pk for s in slices]
    assert block["text"].index("Question 0") < block["text"].index("Question 3")
    assert block["core_id"] == core.pk
    assert block["unit_id"] == slices[0].unit_id
    settings.FORGE_MEMORY_HISTORY_SLICES = 1
    assert selectors.dialog_history_block(tenant=tenant, core=core)["slice_ids"] == [slices[-1].pk]  # type: ignore[index]


def test_after_an_idle_rolling_the_block_still_holds_the_earlier_unit(tenant, talker):
    """A third-round finding (HIGH): an idle rolling starts a new unit; once that unit
    rolled, the block held its slices alone, while ``rolled_through`` still hid every
    earlier rolled turn of the chat: a chat resumed the next day lost the day before."""
    core = talker(turns=2)
    make_idle(core)
    first = roll_committed(core)  # idle: a unit of its own, and a new memory session
    talk(tenant=tenant, user=core.user, turns=3, first=10)
    second = roll_committed(core)  # the new unit's first slice
    assert first.unit_id != second.unit_id
    block = selectors.dialog_history_block(tenant=tenant, core=fresh(core))
    assert block is not None
    assert block["slice_ids"] == [first.slice_id, second.slice_id]  # oldest first
    assert block["unit_id"] == second.unit_id  # the unit it is current in
    assert block["text"].index("Question 0") < block["text"].index("Question 10")


def test_a_block_that_leaves_older_summaries_out_says_so(tenant, talker, settings):
    """A QA finding (HIGH): the block holds the newest slices only, so after enough
    rollings the oldest rolled turns were neither shown raw nor summarized, and nothing
    told the model they existed. Now the block's text says when older dialogue is left
    out, by the slice count, across units, or by the character budget."""
    from memory.wire import HISTORY_HEAD, HISTORY_HEAD_OLDER

    core = talker(turns=2)
    make_idle(core)
    roll_committed(core)  # a unit of its own
    talk(tenant=tenant, user=core.user, turns=3, first=10)
    roll_committed(core)
    talk(tenant=tenant, user=core.user, turns=3, first=20)
    roll_committed(core)

    def head() -> str:
        block = selectors.dialog_history_block(tenant=tenant, core=fresh(core))
        assert block is not None
        return str(block["text"]).split("\n\n", 1)[0]

    assert head() == HISTORY_HEAD  # all three fit
    settings.FORGE_MEMORY_HISTORY_SLICES = 2  # the second unit's two: the first unit's left
    assert head() == HISTORY_HEAD_OLDER
    settings.FORGE_MEMORY_HISTORY_SLICES = 1  # one of the newest unit's two
    assert head() == HISTORY_HEAD_OLDER
    settings.FORGE_MEMORY_HISTORY_SLICES = 3
    settings.FORGE_MEMORY_HISTORY_CHARS = 10  # the budget keeps the newest one only
    assert head() == HISTORY_HEAD_OLDER


def test_dialog_history_block_of_another_tenant_is_not_found(talker, other_tenant):
    core = talker(turns=3)
    with pytest.raises(NotFound):
        selectors.dialog_history_block(tenant=other_tenant, core=core)


# --- update_memory_unit and restore_unit ------------------------------------------------------


def test_update_memory_unit_appends_and_slices(tenant, talker):
    core = talker(turns=1)
    unit, first = services.update_memory_unit(
        tenant=tenant, core=core, messages=turn(0), summary="first"
    )
    unit, second = services.update_memory_unit(
        tenant=tenant, core=core, messages=turn(1) + turn(2), summary="second"
    )
    assert (first.start_index, first.end_index, second.start_index, second.end_index) == (
        0,
        2,
        2,
        6,
    )
    assert unit.message_count == 6
    assert MemoryMessage.objects.filter(unit=unit).count() == 6
    with pytest.raises(InvalidInput):
        services.update_memory_unit(tenant=tenant, core=core, messages=[], summary="x")
    with pytest.raises(InvalidInput):
        services.update_memory_unit(tenant=tenant, core=core, messages=turn(3), summary=" ")


def test_restore_unit_normalizes_what_it_writes(tenant, talker):
    core = talker(turns=1)
    unit = services.restore_unit(
        tenant=tenant,
        core=core,
        unit={
            "conversation_messages": [m for i in range(3) for m in turn(i)],
            "slices": [
                {
                    "id": "msl_b",
                    "start_index": 2,
                    "end_index": 50,
                    "summary": "b",
                    "created_at": "2026-11-30T12:00:02Z",
                },
                {
                    "id": "msl_a",
                    "start_index": -1,
                    "end_index": 4,
                    "summary": "a",
                    "created_at": "2026-11-30T12:00:01Z",
                },
            ],
        },
    )
    ranges = list(
        MemorySlice.objects.filter(unit=unit)
        .order_by("created_at")
        .values_list("id", "start_index", "end_index")
    )
    assert ranges == [("msl_a", 0, 4), ("msl_b", 4, 6)]
    data = selectors.unit_data(tenant=tenant, unit_id=unit.pk)
    assert len(data["conversation_messages"]) == 6
    assert data["memory_session_id"].startswith("mss_")
    with pytest.raises(InvalidInput):
        services.restore_unit(tenant=tenant, core=core, unit={"id": unit.pk})


def test_services_refuse_another_tenants_core(talker, other_tenant):
    core = talker(turns=3)
    with pytest.raises(NotFound):
        services.roll_core(tenant=other_tenant, core=core)
    with pytest.raises(NotFound):
        services.update_memory_unit(tenant=other_tenant, core=core, messages=turn(0), summary="x")
    with pytest.raises(NotFound):
        services.delete_core(tenant=other_tenant, core=core)
    with pytest.raises(NotFound):
        services.restore_unit(tenant=other_tenant, core=core, unit={})
    assert MemoryCore.objects.filter(pk=core.pk).exists()


def test_delete_core_removes_everything_it_holds(tenant, talker):
    core = talker(turns=3)
    roll_committed(core)
    counts = services.delete_core(tenant=tenant, core=core)
    assert counts == {"messages": 4, "slices": 1, "window": 2, "units": 1, "cores": 1}
    for model in (MemoryCore, MemoryUnit, MemorySlice, MemoryMessage, DialogueMessage):
        assert not model.objects.exists()
