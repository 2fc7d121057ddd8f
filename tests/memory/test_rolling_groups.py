"""A sweep commits several cores' rollings in one transaction (``memory.rolling._Group``):
each core's writes in a savepoint of their own, so one core's failure, inside its
writes or at the shared ``COMMIT``, never costs another core its rolling nor leaves any
core half-written.

These tests commit for real (``transaction=True``): the group's transaction, its
``COMMIT`` and the consumers after it are what is tested. Failures are real database
errors (a duplicate primary key; a foreign key the database checks at ``COMMIT``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from memory import rolling, sql
from memory.models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit

from .conftest import options, talk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def due_cores(tenant: Any, user: Any, count: int) -> list[str]:
    """``count`` cores, each with a full window (6 messages: the threshold)."""
    return [talk(tenant=tenant, user=user, agent=f"a{n}", turns=3).pk for n in range(count)]


def assert_rolled(core_id: str) -> None:
    """Fully rolled once (threshold 6, keep 2): 4 messages in a unit, one slice covering
    them, the window holding the 2 newest, ``rolled_seq`` at the cutoff."""
    core = MemoryCore.objects.get(pk=core_id)
    assert (core.rolled_seq, core.window_count, core.window_next_seq) == (4, 2, 6)
    unit = MemoryUnit.objects.get(core=core)
    assert list(MemoryMessage.objects.filter(unit=unit).values_list("index", flat=True)) == [
        0,
        1,
        2,
        3,
    ]
    assert list(MemorySlice.objects.filter(unit=unit).values_list("start_index", "end_index")) == [
        (0, 4)
    ]
    assert (unit.message_count, unit.slice_count) == (4, 1)
    seqs = DialogueMessage.objects.filter(core=core).order_by("seq").values_list("seq", flat=True)
    assert list(seqs) == [4, 5]


def assert_untouched(core_id: str) -> None:
    core = MemoryCore.objects.get(pk=core_id)
    assert (core.rolled_seq, core.window_count, core.window_next_seq) == (0, 6, 6)
    assert not MemoryUnit.objects.filter(core=core).exists()
    assert DialogueMessage.objects.filter(core=core).count() == 6


def advisory_locks() -> int:
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s",
            [sql.ADVISORY_CLASS],
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many cores' rollings each transaction of ``_Group`` wrote (grouped or alone)."""
    sizes: list[int] = []
    real = rolling._Group._write

    def spy(self: Any, entries: Any) -> Any:
        outcomes = real(self, entries)
        sizes.append(sum(1 for o in outcomes if o.status == "rolled"))
        return outcomes

    monkeypatch.setattr(rolling._Group, "_write", spy)
    return sizes


def test_a_sweep_commits_its_cores_in_groups_and_rolls_each_fully(tenant, user, settings, commits):
    settings.FORGE_MEMORY_ROLL_GROUP = 3
    cores = due_cores(tenant, user, 7)
    report = rolling.sweep(options=options())
    assert report.count("rolled") == 7
    assert [o.core_id for o in report.outcomes] == sorted(cores)  # in the cores' order
    assert commits == [3, 3, 1]
    for core_id in cores:
        assert_rolled(core_id)
    assert MemorySlice.objects.filter(indexed=False).count() == 0  # consumers ran
    assert advisory_locks() == 0


def test_a_core_failing_inside_the_group_rolls_back_alone(tenant, user, settings, monkeypatch):
    """The third core's unit gets an id another unit has: its INSERT fails, its savepoint
    is rolled back, the group's other cores are written and committed."""
    settings.FORGE_MEMORY_ROLL_GROUP = 4
    cores = sorted(due_cores(tenant, user, 4))
    taken = MemoryUnit.objects.create(
        id="mun_taken", tenant=tenant, core_id=talk(tenant=tenant, user=user, agent="x").pk
    )
    real = rolling.steps.new_unit_id  # looked up where _plan calls it
    calls = iter(range(100))

    def unit_id() -> str:
        return taken.pk if next(calls) == 2 else real()

    monkeypatch.setattr(rolling.steps, "new_unit_id", unit_id)
    report = rolling.sweep(options=options(), core_ids=cores)
    statuses = {o.core_id: o.status for o in report.outcomes}
    assert statuses == {
        cores[0]: "rolled",
        cores[1]: "rolled",
        cores[2]: "failed",
        cores[3]: "rolled",
    }
    for core_id in (cores[0], cores[1], cores[3]):
        assert_rolled(core_id)
    assert_untouched(cores[2])
    assert advisory_locks() == 0
    # The next sweep rolls it.
    report = rolling.sweep(options=options(), core_ids=[cores[2]])
    assert report.count("rolled") == 1
    assert_rolled(cores[2])


def test_a_group_whose_commit_fails_commits_each_core_alone(
    tenant, user, settings, monkeypatch, commits
):
    """One core's slice names a unit that does not exist: the database checks that
    foreign key at COMMIT (deferred), so the group's COMMIT fails. Every other core of
    the group is then committed alone and rolled; the bad one fails alone, untouched."""
    settings.FORGE_MEMORY_ROLL_GROUP = 4
    cores = sorted(due_cores(tenant, user, 4))
    bad = cores[1]
    real = sql.append_to_unit

    def append(dialect: Any, **kwargs: Any) -> list[sql.Statement]:
        statements = real(dialect, **kwargs)
        if kwargs["core_id"] != bad:
            return statements
        query, params = statements[-1]  # the slice: (id, tenant_id, unit_id, ...)
        assert query.startswith(f"INSERT INTO {sql.SLICE}")
        return [*statements[:-1], (query, [params[0], params[1], "mun_nowhere", *params[3:]])]

    monkeypatch.setattr(sql, "append_to_unit", append)
    report = rolling.sweep(options=options(), core_ids=cores)
    statuses = {o.core_id: o.status for o in report.outcomes}
    assert statuses == {core_id: "failed" if core_id == bad else "rolled" for core_id in cores}
    assert commits == [3]  # the group failed; then each alone, three of them rolled
    for core_id in cores:
        if core_id != bad:
            assert_rolled(core_id)
    assert_untouched(bad)
    assert MemorySlice.objects.filter(indexed=False).count() == 0
    assert advisory_locks() == 0


def test_a_stop_between_cores_commits_what_the_group_holds(tenant, user, settings):
    settings.FORGE_MEMORY_ROLL_GROUP = 10
    cores = sorted(due_cores(tenant, user, 4))
    asked = iter(range(100))
    report = rolling.sweep(options=options(), core_ids=cores, should_stop=lambda: next(asked) == 2)
    assert report.stopped
    assert [o.status for o in report.outcomes] == ["rolled", "rolled"]
    assert_rolled(cores[0])
    assert_rolled(cores[1])
    assert_untouched(cores[2])
    assert advisory_locks() == 0
