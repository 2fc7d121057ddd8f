"""The full-text postings a process holds per core (``memory.postings``): the same ranking
as asking the database, and never stale."""

from __future__ import annotations

import random
from typing import Any

import pytest

from memory import postings, search, selectors, services
from memory.models import MemoryCore, MemorySlice
from memory.search import fulltext

from .conftest import talk

pytestmark = pytest.mark.django_db

WORDS = ["apple", "banana", "cherry", "deploy", "rollback", "coffee", "tea", "lisbon", "porto"]


@pytest.fixture(autouse=True)
def _full_text_only(settings: Any) -> None:
    settings.FORGE_MEMORY_VECTORS = False
    postings.cache.clear()


def add_slice(tenant: Any, core: MemoryCore, summary: str, messages: list[str]) -> MemorySlice:
    _unit, item = services.update_memory_unit(
        tenant=tenant,
        core=core,
        messages=[{"role": "user", "text": m} for m in messages],
        summary=summary,
    )
    search.index_slices([item.pk])
    return item


def found(tenant: Any, user: Any, query: str, agent: str = "build") -> list[str]:
    hits = selectors.search_slices(tenant=tenant, query=query, user=user, agent=agent)
    return [hit.slice.pk for hit in hits]


def test_a_slice_indexed_after_a_search_is_found_by_the_next(tenant, user):
    core = talk(tenant=tenant, user=user, agent="build", turns=1)
    first = add_slice(tenant, core, "apple report", ["the apple orchard"])
    assert found(tenant, user, "apple") == [first.pk]
    assert found(tenant, user, "zeppelin") == []
    second = add_slice(tenant, core, "zeppelin flight", ["apple juice on the zeppelin"])
    assert found(tenant, user, "zeppelin") == [second.pk]
    assert set(found(tenant, user, "apple")) == {first.pk, second.pk}
    entry = postings.cache.terms(tenant.pk, core.pk)
    assert entry.count == 2
    assert len(entry.segments) == 2  # the new slice read alone


def test_a_rebuilt_slice_is_read_again(tenant, user):
    core = talk(tenant=tenant, user=user, agent="build", turns=1)
    item = add_slice(tenant, core, "apple report", ["the apple orchard"])
    other = add_slice(tenant, core, "tea report", ["green tea"])
    assert found(tenant, user, "apple") == [item.pk]
    MemorySlice.objects.filter(pk=item.pk).update(summary="walrus report")
    search.index_fulltext(search.load_docs([item.pk]), rebuild=True)
    assert found(tenant, user, "walrus") == [item.pk]
    assert found(tenant, user, "tea") == [other.pk]
    # The messages still hold "apple"; the summary no longer does.
    entry = postings.cache.terms(tenant.pk, core.pk)
    assert entry.count == 2


def test_a_deleted_core_is_gone_from_a_whole_tenant_search(tenant, user):
    kept = talk(tenant=tenant, user=user, agent="build", turns=1)
    gone = talk(tenant=tenant, user=user, agent="explore", turns=1)
    a = add_slice(tenant, kept, "apple", ["apple"])
    add_slice(tenant, gone, "apple", ["apple"])
    whole = selectors.search_slices(tenant=tenant, query="apple")
    assert len(whole) == 2
    services.delete_core(tenant=tenant, core=gone)
    assert [h.slice.pk for h in selectors.search_slices(tenant=tenant, query="apple")] == [a.pk]


def test_the_held_ranking_is_the_databases(tenant, user, monkeypatch):
    """The same order, weights and window as the statements the database answers
    (``TERMS_CORES_MAX`` 0 sends every search there). Queries of one or two words: a
    sum of three or more weights may differ in its last bit by the order of addition,
    which the database does not fix."""
    rng = random.Random(5)
    cores = [talk(tenant=tenant, user=user, agent=a, turns=1) for a in ("build", "explore")]
    for n in range(60):
        messages = [" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) for _ in range(3)]
        add_slice(tenant, cores[n % 2], " ".join(rng.choices(WORDS, k=3)), messages)
    scopes = [
        search.Scope(tenant_id=tenant.pk, core_ids=(cores[0].pk,)),
        search.Scope(tenant_id=tenant.pk, core_ids=(cores[1].pk, cores[0].pk)),
        search.Scope(tenant_id=tenant.pk, core_ids=(cores[0].pk, cores[1].pk), whole_tenant=True),
    ]
    queries = [*WORDS, "apple banana", "lisbon porto", "coffee zeppelin", "dog dog"]
    for scope in scopes:
        for query in queries:
            words = search.terms(query)
            for window in (5, 100):
                held = search.lexical(scope, words, window=window)
                with monkeypatch.context() as patched:
                    patched.setattr(fulltext, "TERMS_CORES_MAX", 0)
                    asked = search.lexical(scope, words, window=window)
                    # Over SCOPE_CORES_MAX cores (a user with hundreds of agents): the
                    # tenant's postings, narrowed by the scope's slices (SQLite).
                    patched.setattr(fulltext, "SCOPE_CORES_MAX", 0)
                    patched.setattr(search.scope, "SCOPE_CORES_MAX", 0)
                    wide = search.lexical(scope, words, window=window)
                assert held.order == asked.order == wide.order, (scope, query, window)
                assert held.idf == pytest.approx(asked.idf)
                assert wide.idf == pytest.approx(asked.idf)
