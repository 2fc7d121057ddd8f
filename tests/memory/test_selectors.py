"""Reads: wire shapes (CONTRACT §2) and tenant isolation of every selector."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import selectors, services
from memory.exceptions import InvalidQuery, NotFound
from memory.models import MemoryCore, MemorySlice, MemoryUnit

from .conftest import options, roll_committed, talk, turn

pytestmark = pytest.mark.django_db

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def rolled(tenant: Any, user: Any) -> Any:
    core = talk(tenant=tenant, user=user, turns=3)
    roll_committed(core)  # turns 0-1 (keep 2)
    talk(tenant=tenant, user=user, turns=3, first=3)
    roll_committed(core)  # turns 2-4; turn 5 stays in the window, unrolled
    return core


def test_core_wire_shape(tenant, rolled):
    data = selectors.core_data(tenant=tenant, core_id=rolled.pk)
    unit = MemoryUnit.objects.get(core=rolled)
    assert data == {
        "id": rolled.pk,
        "user": "alice",
        "agent": "build",
        "memory_session_id": rolled.memory_session_id,
        "units": [unit.pk],
    }


def test_unit_wire_shape_and_slice_ranges(tenant, rolled):
    unit = MemoryUnit.objects.get(core=rolled)
    data = selectors.unit_data(tenant=tenant, unit_id=unit.pk)
    assert set(data) == {"id", "memory_session_id", "updated_at", "conversation_messages", "slices"}
    assert TIME.fullmatch(data["updated_at"])
    assert len(data["conversation_messages"]) == 10
    message = data["conversation_messages"][0]
    assert set(message) == {"role", "text", "at"}
    assert message["role"] == "user"
    assert TIME.fullmatch(message["at"])
    slices = data["slices"]
    assert [(s["start_index"], s["end_index"]) for s in slices] == [(0, 4), (4, 10)]
    assert set(slices[0]) == {"id", "start_index", "end_index", "summary", "created_at"}
    # Python slice semantics: the second slice's first message is index 4.
    assert data["conversation_messages"][4]["text"] == "Question 2 about topic2. More detail here."


def test_slice_messages_are_its_range(tenant, rolled):
    second = MemorySlice.objects.order_by("created_at")[1]
    messages = selectors.slice_messages(tenant=tenant, slice_id=second.pk)
    assert [m["index"] for m in messages] == list(range(4, 10))
    unit_part = selectors.unit_messages(tenant=tenant, unit_id=second.unit_id, start=4, end=7)
    assert [m["index"] for m in unit_part] == [4, 5, 6]
    with pytest.raises(InvalidQuery):
        selectors.unit_messages(tenant=tenant, unit_id=second.unit_id, start=-1)


def test_lists_windows_and_lookups(tenant, user, rolled):
    assert list(selectors.list_cores(tenant=tenant)) == [rolled]
    assert list(selectors.list_cores(tenant=tenant, agent="explore")) == []
    assert selectors.find_core(tenant=tenant, user=user, agent="build") == rolled
    assert selectors.find_core(tenant=tenant, user=user, agent="explore") is None
    window = selectors.dialogue_window(tenant=tenant, core=rolled)
    assert [m["seq"] for m in window] == [10, 11]


def test_every_selector_hides_another_tenants_data(tenant, user, other_tenant, other_user, rolled):
    unit = MemoryUnit.objects.get(core=rolled)
    item = MemorySlice.objects.first()
    assert item is not None
    for call in (
        lambda: selectors.get_core(tenant=other_tenant, core_id=rolled.pk),
        lambda: selectors.core_data(tenant=other_tenant, core_id=rolled.pk),
        lambda: selectors.get_unit(tenant=other_tenant, unit_id=unit.pk),
        lambda: selectors.unit_data(tenant=other_tenant, unit_id=unit.pk),
        lambda: selectors.unit_messages(tenant=other_tenant, unit_id=unit.pk),
        lambda: selectors.get_slice(tenant=other_tenant, slice_id=item.pk),
        lambda: selectors.slice_messages(tenant=other_tenant, slice_id=item.pk),
        lambda: selectors.dialog_history_block(tenant=other_tenant, core=rolled),
        lambda: selectors.last_rolled_message(tenant=other_tenant, core=rolled, session_id="s"),
    ):
        with pytest.raises(NotFound) as info:
            call()
        assert info.value.code == "not_found"
        assert info.value.status == 404
    assert list(selectors.list_cores(tenant=other_tenant)) == []
    assert selectors.find_core(tenant=other_tenant, user=user, agent="build") is None
    assert selectors.dialogue_window(tenant=other_tenant, core=rolled) == []
    assert selectors.unit_ids(tenant=other_tenant, core=rolled) == []
    assert selectors.unit_slices(tenant=other_tenant, unit=unit) == []
    assert selectors.search_slices(tenant=other_tenant, query="topic1") == []
    assert selectors.search_slices(tenant=tenant, query="topic1")


@pytest.mark.parametrize("bad", ["", "no such", "x" * 65, "a/b", "mco_MISSING"])
def test_bad_or_missing_ids_are_not_found(tenant, bad):
    for call in (selectors.get_core, selectors.get_unit, selectors.get_slice):
        key = {"get_core": "core_id", "get_unit": "unit_id", "get_slice": "slice_id"}[call.__name__]
        with pytest.raises(NotFound):
            call(tenant=tenant, **{key: bad})


# --- last_rolled_message: what the runtime trims from the model's view of a session ---------


def say(core_or_user: Any, tenant: Any, session: str, first: int, turns: int = 1, **kw: Any) -> Any:
    """``turns`` exchanges in session ``session``, message ids ``msg_<session>_<nnn>``."""
    core = None
    for i in range(first, first + turns):
        core = services.append_dialogue(
            tenant=tenant,
            user=core_or_user,
            agent=kw.get("agent", "build"),
            messages=[
                {**m, "session_id": session, "message_id": f"msg_{session}_{2 * i + n:03d}"}
                for n, m in enumerate(turn(i))
            ],
        )
    return core


def test_last_rolled_message_is_the_newest_rolled_message_of_the_session(tenant, user):
    core = say(user, tenant, "ses_a", 0, turns=2)  # msg 000-003 in ses_a
    say(user, tenant, "ses_b", 2)  # msg 004-005 in ses_b: window of 6, threshold
    assert selectors.last_rolled_message(tenant=tenant, core=core, session_id="ses_a") is None
    roll_committed(core)  # rolls the 4 oldest (keep 2): all of ses_a, none of ses_b
    last = selectors.last_rolled_message
    assert last(tenant=tenant, core=core, session_id="ses_a") == "msg_ses_a_003"
    assert last(tenant=tenant, core=core, session_id="ses_b") is None  # kept, unrolled
    assert last(tenant=tenant, core=core, session_id="ses_a", before="msg_ses_a_003") == (
        "msg_ses_a_002"
    )
    assert last(tenant=tenant, core=core, session_id="ses_a", before="msg_ses_a_000") is None
    assert last(tenant=tenant, core=core, session_id="") is None
    # Across units: an idle rolling renews the memory session; the newest still counts.
    say(user, tenant, "ses_a", 10)
    MemoryCore.objects.filter(pk=core.pk).update(last_interaction_at="2000-01-01T00:00:00Z")
    roll_committed(core)
    assert MemoryUnit.objects.filter(core=core).count() == 1  # the same unit: idle renews after
    assert last(tenant=tenant, core=core, session_id="ses_a") == "msg_ses_a_021"
    assert last(tenant=tenant, core=core, session_id="ses_b") == "msg_ses_b_005"
    say(user, tenant, "ses_a", 20, turns=3)
    roll_committed(core)
    assert MemoryUnit.objects.filter(core=core).count() == 2
    assert last(tenant=tenant, core=core, session_id="ses_a") == "msg_ses_a_043"


def test_last_rolled_message_is_the_cores_own(tenant, user):
    mine = say(user, tenant, "ses_a", 0, turns=3)
    other = say(user, tenant, "ses_a", 3, turns=3, agent="explore")  # same session, other core
    roll_committed(mine, options=options(keep=0))
    roll_committed(other, options=options(keep=0))
    last = selectors.last_rolled_message
    assert last(tenant=tenant, core=mine, session_id="ses_a") == "msg_ses_a_005"
    assert last(tenant=tenant, core=other, session_id="ses_a") == "msg_ses_a_011"


def test_last_rolled_message_walks_the_session_index(tenant, user):
    core = say(user, tenant, "ses_a", 0, turns=3)
    roll_committed(core)
    with CaptureQueriesContext(connection) as queries:
        selectors.last_rolled_message(tenant=tenant, core=core, session_id="ses_a")
    [query] = queries.captured_queries
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # a tiny table: make the planner show its options
            # Statistics of this test's rows, not of whatever earlier tests left (in CI's
            # long pass, a stale count of units made the planner start from the unit).
            cursor.execute("ANALYZE memory_memoryunit, memory_memorymessage")
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + query["sql"])
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "memorymessage_session" in plan, plan


@pytest.fixture
def rolled_in_session(tenant: Any, user: Any) -> MemoryCore:
    core = say(user, tenant, "ses_a", 0, turns=3)
    roll_committed(core)
    return core


@pytest.mark.postgres_only
def test_last_rolled_message_under_row_level_security(tenant, rolled_in_session, as_app_role):
    from accounts import tenancy

    core = rolled_in_session
    with tenancy.scope([tenant.pk]):
        assert selectors.last_rolled_message(tenant=tenant, core=core, session_id="ses_a") == (
            "msg_ses_a_003"
        )
    with tenancy.scope([]):  # the database shows no row of the tenant
        assert selectors.last_rolled_message(tenant=tenant, core=core, session_id="ses_a") is None
