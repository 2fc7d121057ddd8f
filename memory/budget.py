"""A process's per-core search state under a byte budget.

Full-text postings (:mod:`memory.postings`) and dense vectors (:mod:`memory.vectors`)
each keep one entry per core, built on first use and refreshed in place. Both are
caches: an entry dropped here is rebuilt from the database on the next search.

Invariants:
- the budget is read from settings when the cache is trimmed, so a test's
  ``override_settings`` applies without a restart;
- trimming drops the least recently used entries until the rest fit, but never the
  last one (the entry a search is about to use would be rebuilt at once);
- one lock guards the dictionary; an entry guards its own contents.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from django.conf import settings


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


K = TypeVar("K", bound=Hashable)
V = TypeVar("V", bound=Sized)


class BudgetCache(Generic[K, V]):
    """Entries by key, least recently used first out past ``setting`` MiB."""

    def __init__(self, *, setting: str, default_mb: float) -> None:
        self.setting = setting
        self.default_mb = default_mb
        self._lock = threading.Lock()
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(
        self, key: K, build: Callable[[], V], *, usable: Callable[[V], bool] | None = None
    ) -> V:
        """The entry for ``key``, built when missing (or not ``usable``), now the most
        recently used."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (usable is not None and not usable(entry)):
                entry = self._entries[key] = build()
            self._entries.move_to_end(key)
            return entry

    @property
    def budget(self) -> float:
        return float(getattr(settings, self.setting, self.default_mb)) * 2**20

    def trim(self) -> None:
        budget = self.budget
        with self._lock:
            held = sum(entry.nbytes for entry in self._entries.values())
            while len(self._entries) > 1 and held > budget:
                _, dropped = self._entries.popitem(last=False)
                held -= dropped.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
