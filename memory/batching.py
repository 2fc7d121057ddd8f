"""A per-thread batch that an AfterRolling consumer fills within a sweep.

``memory.rolling.sweep`` opens the consumers' ``batched()`` contexts; inside them a
consumer :meth:`SweepBatch.add`\\ s what a rolling gave it and handles the batch together
when :meth:`~SweepBatch.add` says it is due. Invariants (each consumer's docstring says
what it batches and why):

* an item waits until the batch holds ``size`` items, until its oldest item has waited
  ``seconds`` by the time another one arrives, or until the outermost ``batched()``
  exits (normally or not): at most one more rolling plus ``seconds``, never past the
  sweep;
* items are kept in the order they came, one per key (a later value replaces an
  earlier one's);
* the batch is the thread's own: sweeps on other threads batch apart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class _State(threading.local):
    depth = 0
    since = 0.0

    def __init__(self) -> None:
        self.items: dict[object, object] = {}


class SweepBatch(Generic[K, V]):
    def __init__(self) -> None:
        self._state = _State()

    @property
    def open(self) -> bool:
        """Whether this thread is inside a ``batched()`` of this batch."""
        return self._state.depth > 0

    @contextmanager
    def batched(self, flush: Callable[[], object]) -> Iterator[None]:
        """Within, items wait in the batch; the outermost exit calls ``flush``. Nests."""
        state = self._state
        state.depth += 1
        try:
            yield
        finally:
            state.depth -= 1
            if state.depth == 0:
                flush()

    def add(self, key: K, value: V, *, size: int, seconds: float) -> bool:
        """Put ``value`` in the batch; True when the batch is due (call the flush)."""
        state = self._state
        now = time.monotonic()
        if not state.items:
            state.since = now
        state.items[key] = value
        return len(state.items) >= size or now - state.since >= seconds

    def take(self) -> dict[K, V]:
        """The waiting items, in the order they came; the batch is empty after."""
        items, self._state.items = self._state.items, {}
        return items  # type: ignore[return-value]
