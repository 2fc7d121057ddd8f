"""Reads: wire shapes (CONTRACT §2) and tenant isolation of every selector."""

from __future__ import annotations

import re
from typing import Any

import pytest

from memory import selectors
from memory.exceptions import InvalidQuery, NotFound
from memory.models import MemorySlice, MemoryUnit

from .conftest import roll_committed, talk

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
