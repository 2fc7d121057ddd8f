"""The AfterRolling search-index consumer batching a sweep's slices (``memory.indexing``).

These tests commit for real (``transaction=True``): the consumer runs from the
rollings' ``on_commit``, inside the sweep, which is what batching is about.
"""

from __future__ import annotations

from typing import Any

import pytest

from memory import indexing, search
from memory.models import MemorySlice, MemoryVectors
from memory.rolling import roll, sweep

from .conftest import options, talk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def due_cores(tenant: Any, user: Any, count: int) -> list[str]:
    """``count`` cores, each with a full window (6 messages: the threshold)."""
    return [talk(tenant=tenant, user=user, agent=f"a{n}", turns=3).pk for n in range(count)]


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the non-empty batches handed to ``search.index_docs``."""
    sizes: list[int] = []
    real = search.index_docs

    def spy(docs: Any) -> int:
        if docs:
            sizes.append(len(docs))
        return real(docs)

    monkeypatch.setattr(search, "index_docs", spy)
    return sizes


def unindexed() -> int:
    return MemorySlice.objects.filter(indexed=False).count()


def test_a_sweep_indexes_its_slices_in_batches_and_all_of_them(tenant, user, batches, monkeypatch):
    monkeypatch.setattr(indexing, "BATCH_SLICES", 2)
    monkeypatch.setattr(indexing, "BATCH_SECONDS", 3600.0)
    due_cores(tenant, user, 5)
    report = sweep(options=options())
    assert report.count("rolled") == 5
    assert batches == [2, 2, 1]  # the last one when the sweep ends
    assert unindexed() == 0
    assert MemoryVectors.objects.count() == 5


def test_a_slice_never_waits_past_batch_seconds(tenant, user, batches, monkeypatch):
    monkeypatch.setattr(indexing, "BATCH_SECONDS", 0.0)
    due_cores(tenant, user, 3)
    sweep(options=options())
    assert batches == [1, 1, 1]


def test_outside_a_sweep_a_rolling_is_indexed_before_it_returns(tenant, user, batches):
    core_id = due_cores(tenant, user, 1)[0]
    outcome = roll(core_id, options=options())
    assert outcome.status == "rolled"
    assert batches == [1]
    assert MemorySlice.objects.get(pk=outcome.slice_id).indexed


def test_a_failing_batch_is_retried_one_slice_at_a_time(tenant, user, monkeypatch, caplog):
    """One slice that cannot be indexed costs only itself; the next sweep's catch-up
    indexes it, vectors included."""
    cores = due_cores(tenant, user, 3)
    bad_core = cores[1]
    real = search.index_docs

    def flaky(docs: Any) -> int:
        if any(doc.core_id == bad_core for doc in docs):
            raise RuntimeError("the database went away")
        return real(docs)

    monkeypatch.setattr(search, "index_docs", flaky)
    monkeypatch.setattr(indexing, "BATCH_SECONDS", 3600.0)
    report = sweep(options=options())
    assert report.count("rolled") == 3  # the rollings themselves are untouched
    left = list(MemorySlice.objects.filter(indexed=False).values_list("unit__core_id", flat=True))
    assert left == [bad_core]
    assert "left unindexed" in caplog.text

    monkeypatch.setattr(search, "index_docs", real)
    assert search.index_pending() == 1
    assert unindexed() == 0
    assert MemoryVectors.objects.count() == 3
