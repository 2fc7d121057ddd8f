"""``memory.batching.SweepBatch``: the per-thread batch both AfterRolling consumers
(indexing, the history digest) fill within a sweep."""

from __future__ import annotations

import threading

from memory.batching import SweepBatch


def test_a_batch_is_due_at_its_size_and_flushed_once_by_the_outermost_exit():
    batch: SweepBatch[str, int] = SweepBatch()
    flushed: list[dict[str, int]] = []

    def flush() -> None:
        flushed.append(batch.take())

    assert not batch.open
    with batch.batched(flush):
        with batch.batched(flush):
            assert batch.open
            assert not batch.add("a", 1, size=3, seconds=3600)
            assert not batch.add("b", 2, size=3, seconds=3600)
        assert flushed == []  # the inner exit is not the outermost
        assert batch.add("c", 3, size=3, seconds=3600)
    assert flushed == [{"a": 1, "b": 2, "c": 3}]
    assert not batch.open


def test_a_batch_is_due_once_its_first_item_waited_and_a_key_keeps_its_place():
    batch: SweepBatch[str, int] = SweepBatch()
    with batch.batched(lambda: None):
        assert not batch.add("a", 1, size=10, seconds=3600)
        assert not batch.add("b", 2, size=10, seconds=3600)
        assert not batch.add("a", 3, size=10, seconds=3600)
        assert batch.take() == {"a": 3, "b": 2}
        assert list(batch.take()) == []
        assert batch.add("x", 1, size=10, seconds=0.0)  # waited long enough at once
        batch.take()
        assert not batch.add("y", 2, size=10, seconds=3600)  # the first item starts the clock
        assert batch.add("z", 3, size=10, seconds=0.0)


def test_each_thread_has_its_own_batch():
    batch: SweepBatch[str, int] = SweepBatch()
    seen: dict[str, object] = {}

    def other() -> None:
        seen["open"] = batch.open
        seen["items"] = batch.take()

    with batch.batched(lambda: None):
        batch.add("mine", 1, size=10, seconds=3600)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert batch.take() == {"mine": 1}
    assert seen == {"open": False, "items": {}}


def test_the_flush_runs_when_the_sweep_fails():
    batch: SweepBatch[str, int] = SweepBatch()
    flushed: list[dict[str, int]] = []
    try:
        with batch.batched(lambda: flushed.append(batch.take())):
            batch.add("a", 1, size=10, seconds=3600)
            raise RuntimeError("a sweep that fails")
    except RuntimeError:
        pass
    assert flushed == [{"a": 1}]
