"""The per-core search caches' byte budget (``memory.budget.BudgetCache``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.test import override_settings

from memory.budget import BudgetCache


@dataclass
class Entry:
    name: str
    nbytes: int


MIB = 2**20


def builder(name: str, nbytes: int) -> Callable[[], Entry]:
    return lambda: Entry(name, nbytes)


def cache() -> BudgetCache[str, Entry]:
    return BudgetCache(setting="FORGE_TEST_BUDGET_MB", default_mb=2)


def test_an_entry_is_built_once_and_rebuilt_only_when_unusable() -> None:
    held = cache()
    built: list[str] = []

    def build() -> Entry:
        built.append("a")
        return Entry("a", 1)

    first = held.get("a", build)
    assert held.get("a", build) is first
    assert held.get("a", build, usable=lambda entry: entry.nbytes == 2) is not first
    assert built == ["a", "a"]


def test_trim_drops_the_least_recently_used_until_the_rest_fit() -> None:
    held = cache()
    for name in ("a", "b", "c"):
        held.get(name, builder(name, MIB))
    held.get("a", lambda: Entry("new", 0))  # "a" is now the most recently used
    held.trim()  # 3 MiB held, 2 MiB allowed: "b" goes
    assert len(held) == 2
    assert held.get("b", lambda: Entry("rebuilt", 0)).name == "rebuilt"
    assert held.get("a", lambda: Entry("new", 0)).name == "a"


def test_the_budget_is_read_at_trim_time_and_the_last_entry_stays() -> None:
    held = cache()
    held.get("a", lambda: Entry("a", MIB))
    held.get("b", lambda: Entry("b", 5 * MIB))
    with override_settings(FORGE_TEST_BUDGET_MB=1):
        held.trim()
    assert len(held) == 1  # "b" alone is over the budget, and stays
    assert held.get("b", lambda: Entry("rebuilt", 0)).name == "b"
    held.clear()
    assert len(held) == 0
