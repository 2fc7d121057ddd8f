"""One wire shape per kind (``memory/wire.py``), whichever path produced it.

A rolling's ``RollingResult`` (built from what its transaction wrote, never read
back), the compressor's merged messages and the selectors' reads of the store all
give the same dicts for the same data.
"""

from __future__ import annotations

import pytest

from memory import after_rolling, selectors
from memory.compressor import compress
from memory.exceptions import InvalidQuery
from memory.models import MemoryCore, MemoryUnit
from memory.normalize import clean_messages
from memory.results import RollingResult
from memory.times import now_ms

from .conftest import roll_committed, talk

pytestmark = pytest.mark.django_db


def test_a_rollings_result_is_what_the_store_then_gives(tenant, user):
    core = talk(tenant=tenant, user=user, turns=3)
    seen: list[RollingResult] = []
    after_rolling.register(seen.append)
    try:
        outcome = roll_committed(core)
    finally:
        after_rolling.unregister(seen.append)
    assert outcome.status == "rolled"
    [result] = seen
    unit = selectors.unit_data(tenant=tenant, unit_id=result.unit_id)
    [stored] = unit["slices"]
    assert result.slice == stored
    assert list(result.messages) == unit["conversation_messages"][: len(result.messages)]
    assert set(result.messages[0]) == {"role", "text", "at"}


def test_the_compressor_gives_the_message_shape(tenant, user):
    talk(tenant=tenant, user=user, turns=1)
    core = MemoryCore.objects.get()
    window = selectors.dialogue_window(tenant=tenant, core=core)
    messages = clean_messages(
        [{k: m[k] for k in ("role", "text", "at")} for m in window], now=now_ms()
    )
    compressed = compress(messages)
    assert compressed == [{k: m[k] for k in ("role", "text", "at")} for m in window]
    assert [set(m) for m in window] == [{"role", "text", "at", "seq"}] * 2


def test_cores_data_reads_every_cores_units_in_one_query(
    tenant, user, other_tenant, other_user, django_assert_num_queries
):
    first = talk(tenant=tenant, user=user, agent="build", turns=3)
    roll_committed(first)
    second = talk(tenant=tenant, user=user, agent="plan", turns=1)
    theirs = talk(tenant=other_tenant, user=other_user, agent="build", turns=3)
    roll_committed(theirs)
    cores = list(selectors.list_cores(tenant=tenant))
    with django_assert_num_queries(1):
        data = selectors.cores_data(tenant=tenant, cores=cores)
    assert data == [selectors.core_data(tenant=tenant, core_id=core.pk) for core in cores]
    assert {d["id"]: len(d["units"]) for d in data} == {first.pk: 1, second.pk: 0}
    # Another tenant's core never shows its units through a tenant's read.
    foreign = MemoryCore.objects.select_related("user").get(pk=theirs.pk)
    [shown] = selectors.cores_data(tenant=tenant, cores=[foreign])
    assert shown["units"] == []
    assert MemoryUnit.objects.filter(core=theirs).exists()


def test_unit_message_rows_are_a_range_of_the_tenants_unit(tenant, user, other_tenant):
    core = talk(tenant=tenant, user=user, turns=4)
    roll_committed(core)  # rolls 6 of the 8 messages (keep=2 stay unrolled)
    unit = MemoryUnit.objects.get(core=core)
    rows = selectors.unit_message_rows(tenant=tenant, unit=unit, start=2, end=5)
    assert [row.index for row in rows] == [2, 3, 4]
    whole = selectors.unit_data(tenant=tenant, unit_id=unit.pk)["conversation_messages"]
    assert [row.text for row in rows] == [m["text"] for m in whole[2:5]]
    assert selectors.unit_message_rows(tenant=other_tenant, unit=unit) == []
    with pytest.raises(InvalidQuery):
        selectors.unit_message_rows(tenant=tenant, unit=unit, start=-1)
