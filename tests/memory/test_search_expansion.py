"""Query expansion and the neighbouring-message share of memory search (issue 18), on
both engines: a question worded apart from what was said ("vehicle" for "car") is found
by the offline model's nearest words, a direct match still outranks one by a
neighbour word, the held postings and the database weigh expansion terms the same,
and an answer spread over two adjacent messages outranks the same words far apart."""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.test import TestCase

from memory import postings, search, selectors, services
from memory.embeddings import neighbours
from memory.models import MemoryCore, MemorySlice
from memory.search import fulltext

from .conftest import talk

pytestmark = pytest.mark.django_db

FILLER = [
    "Good morning, how was the weekend?",
    "Quiet. I mostly read at home.",
    "Anything else new?",
    "Not really, work is busy.",
]


@pytest.fixture(autouse=True)
def _full_text_only(settings: Any) -> None:
    """Full text alone: what is found here is found by words, never by meaning."""
    settings.FORGE_MEMORY_VECTORS = False
    postings.cache.clear()


def remember(tenant: Any, user: Any, texts: list[str]) -> MemorySlice:
    core = MemoryCore.objects.filter(tenant=tenant, user=user, agent="build").first()
    if core is None:
        core = talk(tenant=tenant, user=user, agent="build", turns=1)
    with TestCase.captureOnCommitCallbacks(execute=True):
        _unit, item = services.update_memory_unit(
            tenant=tenant,
            core=core,
            messages=[{"role": "user", "text": t} for t in texts],
            summary="They talked for a while.",
        )
    return item


def found(tenant: Any, user: Any, query: str) -> list[str]:
    hits = selectors.search_slices(tenant=tenant, query=query, user=user, agent="build")
    return [hit.slice.pk for hit in hits]


def test_a_whole_word_has_neighbours_and_a_cut_word_none():
    near = dict(neighbours.of("vehicle"))
    assert "car" in near
    assert 0 < near["car"] < 1
    assert list(near.values()) == sorted(near.values(), reverse=True)
    assert neighbours.of("relocating") == ()  # no row of its own: "▁reloc" + "ating"
    assert neighbours.of("zzqxv") == ()


def test_expansion_adds_near_words_below_the_querys_own(settings):
    words = search.terms("Which vehicle did Grace buy?")
    added = search.expansion("Which vehicle did Grace buy?", words)
    assert "car" in added
    assert not set(added) & set(words)  # never a query token again ("vehicles" → vehicl)
    assert all(0 < boost <= search.expansion_weight() for boost in added.values())
    assert len(added) <= search.EXPANSION_MAX
    assert search.expansion("我昨天喝了咖啡", search.terms("我昨天喝了咖啡")) == {}
    settings.FORGE_MEMORY_EXPANSION_WEIGHT = 0
    assert search.expansion("Which vehicle did Grace buy?", words) == {}


def test_a_question_worded_apart_is_found_by_a_near_word(tenant, user, settings):
    said = remember(tenant, user, [*FILLER, "We finally bought a used car last weekend!"])
    remember(tenant, user, [*FILLER, "The garden is full of tomatoes this year."])
    assert found(tenant, user, "Which vehicle did they purchase?") == [said.pk]
    settings.FORGE_MEMORY_EXPANSION_WEIGHT = 0
    postings.cache.clear()
    assert found(tenant, user, "Which vehicle did they purchase?") == []


def test_the_querys_own_word_outranks_a_near_word(tenant, user):
    near = remember(tenant, user, [*FILLER, "We finally bought a used car last weekend!"])
    same = remember(tenant, user, [*FILLER, "We finally bought a used vehicle last weekend!"])
    assert found(tenant, user, "Which vehicle did they purchase?") == [same.pk, near.pk]


WORDS = ["car", "vehicle", "truck", "dog", "puppy", "pet", "book", "novel", "tea"]


def test_the_held_ranking_weighs_expansion_terms_as_the_database(tenant, user, monkeypatch):
    """Boosted terms: the same order and weights from the held postings as from the
    statements the database answers (``TERMS_CORES_MAX`` 0 sends every search there)."""
    rng = random.Random(7)
    cores = [talk(tenant=tenant, user=user, agent=a, turns=1) for a in ("build", "explore")]
    for n in range(40):
        messages = [" ".join(rng.choices(WORDS, k=rng.randint(1, 5))) for _ in range(3)]
        _unit, item = services.update_memory_unit(
            tenant=tenant,
            core=cores[n % 2],
            messages=[{"role": "user", "text": m} for m in messages],
            summary=" ".join(rng.choices(WORDS, k=2)),
        )
        search.index_slices([item.pk])
    scopes = [
        search.Scope(tenant_id=tenant.pk, core_ids=(cores[0].pk,)),
        search.Scope(tenant_id=tenant.pk, core_ids=(cores[0].pk, cores[1].pk), whole_tenant=True),
    ]
    for scope in scopes:
        for query in ("vehicle", "dog", "novel"):
            words = search.terms(query)
            boosts = search.expansion(query, words)
            assert boosts, query
            terms = [*words, *boosts]
            held = search.lexical(scope, terms, window=100, boosts=boosts)
            with monkeypatch.context() as patched:
                patched.setattr(fulltext, "TERMS_CORES_MAX", 0)
                asked = search.lexical(scope, terms, window=100, boosts=boosts)
            assert held.order == asked.order, (scope, query)
            assert held.idf == pytest.approx(asked.idf)
            unboosted = search.lexical(scope, terms, window=100)
            both = held.idf.keys() & unboosted.idf.keys()  # (each drops its light terms)
            assert both & boosts.keys(), query
            for term in both:
                assert held.idf[term] == pytest.approx(unboosted.idf[term] * boosts.get(term, 1.0))


def test_words_said_in_adjacent_messages_outrank_the_same_words_far_apart():
    idf = {"puppy": 2.0, "name": 1.0}
    apart = search.Candidate(
        slice_id="apart", core_id="c", start_index=0, body="s\npuppy\nx\ny\nz\nname"
    )
    adjacent = search.Candidate(
        slice_id="adjacent", core_id="c", start_index=0, body="s\nx\npuppy\nname\ny"
    )
    found_ = {c.slice_id: c for c in (apart, adjacent)}
    assert search.best_message_matches(["apart", "adjacent"], found_, idf) == [
        "adjacent",
        "apart",
    ]
    # One message saying both still beats two neighbours saying them.
    together = search.Candidate(
        slice_id="together", core_id="c", start_index=0, body="s\npuppy name\nx"
    )
    found_["together"] = together
    ranked = search.best_message_matches(["apart", "adjacent", "together"], found_, idf)
    assert ranked == ["together", "adjacent", "apart"]


def test_low_weight_latin_terms_are_dropped_and_cjk_kept():
    idf = {"lisbon": 2.0, "sister": 1.0, "new": 0.4, "咖": 0.1, "咖啡": 1.5}
    assert search.salient(idf) == {"lisbon": 2.0, "sister": 1.0, "咖": 0.1, "咖啡": 1.5}
    assert search.salient({}) == {}


def test_a_slice_matching_only_everyday_words_is_not_a_full_text_hit(tenant, user):
    """Every slice says "weekend"; only one names the city: the others are not ranked
    for matching the everyday word alone."""
    city = remember(tenant, user, [*FILLER, "My sister and I spent five days in Lisbon."])
    for _ in range(5):
        remember(tenant, user, [*FILLER, "The weekend was long."])
    assert found(tenant, user, "Which weekend city did they visit, Lisbon?") == [city.pk]
