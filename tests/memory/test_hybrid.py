"""Hybrid memory search, on both engines: what was said is found (raw messages, not only
summaries), in Chinese, Japanese and accented Latin, by words and by meaning, fused by
rank; a failing embedder falls back to full text; other tenants and users stay out.

The embedder is the suite's deterministic one (``tests/memory/embedders.py``): hashed
character trigrams, plus a few synonyms (espresso ~ latte) that make a match by meaning
alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from django.db import connection
from django.test import TestCase

from accounts import tenancy
from memory import search, selectors, services
from memory.models import MemoryCore, MemorySlice, MemoryVectors
from memory.search import hybrid

from .conftest import roll_committed, talk

pytestmark = pytest.mark.django_db

DOWN = [
    "tests.memory.embedders.down",
    "tests.memory.embedders.crashing",
    "tests.memory.embedders.wrong_dimension",
    "tests.memory.embedders.not_a_number",
    "tests.memory.embedders.broken_factory",
    "tests.memory.embedders.no_such_factory",
]


def remember(
    tenant: Any,
    user: Any,
    texts: Sequence[str],
    *,
    summary: str = "They talked for a while.",
    agent: str = "build",
) -> MemorySlice:
    """A slice of these messages (user and assistant in turn) with this summary, indexed
    as on commit (full text and vectors)."""
    core = MemoryCore.objects.filter(tenant=tenant, user=user, agent=agent).first()
    if core is None:
        core = services.append_dialogue(
            tenant=tenant, user=user, agent=agent, messages=[{"role": "user", "text": "hi"}]
        )
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "text": text}
        for i, text in enumerate(texts)
    ]
    with TestCase.captureOnCommitCallbacks(execute=True):
        _unit, item = services.update_memory_unit(
            tenant=tenant, core=core, messages=messages, summary=summary
        )
    return item


def found(tenant: Any, query: str, **kwargs: Any) -> list[str]:
    return [hit.slice.pk for hit in selectors.search_slices(tenant=tenant, query=query, **kwargs)]


FILLER = [
    "Good morning, how was the weekend?",
    "Quiet. I mostly read at home.",
    "Anything else new?",
    "Not really, work is busy.",
]


# --- what was said, in any script ----------------------------------------------------------


def test_a_word_said_in_a_message_is_found_though_the_summary_lacks_it(tenant, user):
    item = remember(tenant, user, [*FILLER, "We finally adopted a greyhound named Biscuit."])
    remember(tenant, user, FILLER)
    hits = selectors.search_slices(tenant=tenant, query="greyhound", user=user, agent="build")
    assert hits[0].slice.pk == item.pk
    best = hits[0].messages[0]
    assert best.index == item.start_index + 4
    assert best.message.role == "user"
    assert "greyhound named Biscuit" in best.snippet
    wire = hits[0].wire()["messages"][0]
    assert wire == {
        "index": best.index,
        "role": "user",
        "at": wire["at"],
        "snippet": best.snippet,
    }
    assert wire["at"].endswith("Z")


def test_chinese_is_found_by_a_word_that_is_not_space_delimited(tenant, user):
    said = ["你好", "我昨天喝了咖啡，还吃了蛋糕。", "听起来不错"]  # noqa: RUF001
    coffee = remember(tenant, user, said)
    tea = remember(tenant, user, ["我每天早上喝茶。", "好习惯"])
    assert found(tenant, "咖啡")[0] == coffee.pk
    assert found(tenant, "蛋糕")[0] == coffee.pk
    assert found(tenant, "喝茶")[0] == tea.pk
    assert found(tenant, "茶")[0] == tea.pk  # one character: its unigram
    hit = selectors.search_slices(tenant=tenant, query="咖啡", limit=1)[0]
    assert hit.messages[0].index == coffee.start_index + 1
    assert "咖啡" in hit.messages[0].snippet


def test_japanese_is_found_inside_a_sentence(tenant, user):
    said = ["昨日は友達とラーメンを食べました。", "いいですね！"]  # noqa: RUF001
    ramen = remember(tenant, user, said)
    remember(tenant, user, ["明日は雨が降るそうです。", "傘を持って行きます。"])
    assert found(tenant, "ラーメン")[0] == ramen.pk
    assert found(tenant, "友達")[0] == ramen.pk
    assert found(tenant, "傘")[0] != ramen.pk


def test_letters_newer_than_the_databases_unicode_tables_are_plain_tokens(tenant, user):
    # U+9FEF (CJK, Unicode 11) and Adlam (Unicode 9): letters to Python, unknown to
    # SQLite's Unicode 6.1 tables; a token is never cut in two (no phrase query).
    item = remember(tenant, user, ["咖\u9fef啡 and \U0001e900\U0001e901 word"])
    assert found(tenant, "\u9fef啡") == [item.pk]
    assert found(tenant, "\U0001e900\U0001e901") == [item.pk]


def test_accents_fold_both_ways(tenant, user):
    cafe = remember(tenant, user, ["We met at the Café Crème on Monday."])
    resume = remember(tenant, user, ["I sent my resume to the agency."])
    assert found(tenant, "cafe creme")[0] == cafe.pk
    assert found(tenant, "CAFÉ")[0] == cafe.pk
    assert found(tenant, "résumé")[0] == resume.pk
    assert (
        "Café Crème" in selectors.search_slices(tenant=tenant, query="cafe")[0].messages[0].snippet
    )


def test_english_stems_still_match(tenant, user):
    item = remember(tenant, user, ["The deployment went badly; we rolled it back twice."])
    assert found(tenant, "deploying")[0] == item.pk
    assert found(tenant, "roll")[0] == item.pk


NO_TOKENS = ["the of and", "😀🎉🔥", "。，、「」！？", "   ", "!!!"]  # noqa: RUF001


@pytest.mark.parametrize("query", NO_TOKENS)
def test_queries_with_no_tokens_give_nothing_and_ask_no_embedder(tenant, user, query, settings):
    remember(tenant, user, ["The of and 😀 。"])
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.down"  # would log if asked
    assert selectors.search_slices(tenant=tenant, query=query) == []


# --- fusion ---------------------------------------------------------------------------------


def test_fusion_formula():
    # c: 1/61 + 1/63; a: 1/61; b and d: 1/62 each, b first (ranked in the first list).
    assert search.fuse([["a", "b", "c"], ["c", "d"]]) == ["c", "a", "b", "d"]
    assert search.fuse([[], ["x", "y"]]) == ["x", "y"]


def test_a_match_by_meaning_alone_is_found(tenant, user):
    espresso = remember(tenant, user, ["I drank an espresso this morning."])
    remember(tenant, user, FILLER)
    hits = selectors.search_slices(tenant=tenant, query="latte")
    assert hits[0].slice.pk == espresso.pk  # no word in common
    assert hits[0].messages[0].index == espresso.start_index


def test_the_slice_matching_by_words_and_meaning_ranks_first(tenant, user, settings):
    # Only strong matches by meaning count here, so that the slice with the word in a
    # long unrelated note is a match by words only.
    settings.FORGE_MEMORY_DENSE_MIN_SIMILARITY = 0.4
    # A slice's dense score is the mean of its summary's and its best message's cosine:
    # each summary says what its one message says, as an extractive summary would.
    note = (
        "The espresso entry sits in this long note about taxes, invoices, receipts, "
        "budgets, accounting spreadsheets and the quarterly filing deadline for the company."
    )
    words_only = remember(tenant, user, [note], summary=note)
    latte = "She ordered a latte and a cappuccino."
    meaning_only = remember(tenant, user, [latte], summary=latte)
    drank = "I drank an espresso this morning."
    both = remember(tenant, user, [drank], summary=drank)
    remember(tenant, user, FILLER)
    hits = selectors.search_slices(tenant=tenant, query="espresso")
    assert [h.slice.pk for h in hits] == [both.pk, words_only.pk, meaning_only.pk]
    assert [h.rank for h in hits] == [1, 2, 3]
    # Full text alone: the match by meaning is not found, the others keep their order.
    settings.FORGE_MEMORY_VECTORS = False
    assert found(tenant, "espresso") == [both.pk, words_only.pk]


# --- the embedder failing -------------------------------------------------------------------


@pytest.mark.parametrize("embedder", DOWN)
def test_an_embedder_failing_at_query_time_gives_full_text_results(
    tenant, user, settings, caplog, embedder
):
    espresso = remember(tenant, user, ["I drank an espresso this morning."])
    remember(tenant, user, ["She ordered a latte and a cappuccino."])
    settings.FORGE_MEMORY_EMBEDDER = embedder
    with caplog.at_level(logging.WARNING, logger="memory.search"):
        assert found(tenant, "espresso") == [espresso.pk]  # the latte is found by meaning only
    assert any("full" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.parametrize("embedder", DOWN[:4])  # down, raising, wrong dimension, NaN
def test_an_embedder_failing_at_rolling_time_leaves_full_text_and_a_warning(
    tenant, user, settings, caplog, embedder
):
    settings.FORGE_MEMORY_EMBEDDER = embedder
    core = talk(tenant=tenant, user=user, turns=3)
    with caplog.at_level(logging.WARNING, logger="memory.search"):
        outcome = roll_committed(core)
    assert outcome.status == "rolled"
    assert "without vectors" in caplog.text
    item = MemorySlice.objects.get(pk=outcome.slice_id)
    assert item.indexed
    assert not MemoryVectors.objects.filter(slice=item).exists()
    assert found(tenant, "topic1") == [item.pk]  # turn 2 is kept (keep=2), not rolled


def test_a_rolling_stores_vectors_per_slice_and_message(tenant, user):
    core = talk(tenant=tenant, user=user, turns=3)
    outcome = roll_committed(core)
    row = MemoryVectors.objects.get(slice_id=outcome.slice_id)
    assert (row.model, row.dim) == ("test/hashed-trigrams@512", 512)
    assert row.rows == 1 + outcome.messages  # the summary, then each message
    assert row.core_id == core.pk
    assert len(bytes(row.data)) == row.rows * row.dim * 2  # float16


# --- isolation ------------------------------------------------------------------------------


@pytest.fixture
def memories(tenant, user, other_user) -> dict[str, MemorySlice]:
    """The same words and meanings in the memory of alice, of carol (alice's tenant), of
    alice with another agent, and of bob (another tenant); written as the owner."""
    from accounts.models import Membership, User

    carol = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=tenant, user=carol)
    globex = other_user.tenants.get()
    said = ["The zebra drank an espresso at the zoo."]
    return {
        "alice": remember(tenant, user, said),
        "explore": remember(tenant, user, said, agent="explore"),
        "carol": remember(tenant, carol, said),
        "bob": remember(globex, other_user, said),
    }


@pytest.mark.parametrize("query", ["zebra", "latte"])  # by words, by meaning
def test_other_tenants_and_users_never_appear_under_row_level_security(
    memories, tenant, user, other_user, as_app_role, query
):
    globex = other_user.tenants.get()
    with tenancy.scope([tenant.pk]):
        mine = found(tenant, query, user=user, agent="build")
        assert mine == [memories["alice"].pk]
        assert set(found(tenant, query, user=user)) == {
            memories["alice"].pk,
            memories["explore"].pk,
        }
        assert set(found(tenant, query)) == {
            memories["alice"].pk,
            memories["explore"].pk,
            memories["carol"].pk,
        }
        assert found(tenant, query, user=other_user) == []
        if connection.vendor == "postgresql":  # row-level security: no row of globex here
            assert found(globex, query) == []
    with tenancy.scope([globex.pk]):
        assert found(globex, query) == [memories["bob"].pk]
        if connection.vendor == "postgresql":
            assert found(tenant, query, user=user) == []


def test_restored_units_are_indexed_by_their_messages_on_commit(tenant, user):
    core = talk(tenant=tenant, user=user, turns=1)
    with TestCase.captureOnCommitCallbacks(execute=True):
        unit = services.restore_unit(
            tenant=tenant,
            core=core,
            unit={
                "conversation_messages": [
                    {"role": "user", "text": "My sister lives in Valparaíso."},
                    {"role": "assistant", "text": "A lovely city."},
                    {"role": "user", "text": "她养了一只猫。"},
                ],
                "slices": [
                    {"summary": "Family.", "start_index": 0, "end_index": 2},
                    {"summary": "Pets.", "start_index": 2, "end_index": 3},
                ],
            },
        )
    first, second = MemorySlice.objects.filter(unit=unit).order_by("start_index")
    assert found(tenant, "valparaiso") == [first.pk]
    assert found(tenant, "一只猫") == [second.pk]
    assert MemoryVectors.objects.filter(slice__unit=unit).count() == 2
    hit = selectors.search_slices(tenant=tenant, query="猫")[0]
    assert (hit.slice.pk, hit.messages[0].index) == (second.pk, 2)


# --- ranking rules ---------------------------------------------------------------------------


def test_a_message_saying_every_query_word_outranks_the_words_spread_over_a_slice():
    """The passage ranking: one message holding all the query's words comes first, though
    another slice holds each of them (more often) in separate messages."""
    idf = {"guitar": 2.0, "lesson": 1.5, "tuesday": 1.0}
    spread = search.Candidate(
        slice_id="spread",
        core_id="c",
        start_index=0,
        body="summary line\nguitar guitar\nlesson lesson\ntuesday",
    )
    together = search.Candidate(
        slice_id="together",
        core_id="c",
        start_index=0,
        body="summary line\nhello\nguitar lesson tuesday",
    )
    summary_only = search.Candidate(
        slice_id="summary", core_id="c", start_index=0, body="guitar lesson tuesday\nhello"
    )
    found = {c.slice_id: c for c in (spread, together, summary_only)}
    ranked = search.best_message_matches(["spread", "together", "summary"], found, idf)
    assert ranked == ["together", "spread"]  # a match in the summary alone is not a message


def test_a_slice_scores_the_mean_of_its_summary_and_best_message():
    from memory import vectors

    sims = np.asarray([0.2, 0.9, 0.1, 0.6, 0.4], dtype=np.float32)  # slice a: 3 rows, b: 1, c: 1
    firsts = np.asarray([0, 3, 4])
    got = vectors.slice_similarity(sims, firsts)
    assert got.tolist() == pytest.approx([(0.2 + 0.9) / 2, 0.6, 0.4])


# --- the dense query -------------------------------------------------------------------------


def test_the_dense_query_leaves_out_words_full_text_dropped_as_too_common(
    tenant, user, monkeypatch
):
    """Every slice greets Samuel; only one says "hobby". Full text drops "samuel" (its
    idf is under a quarter of "hobby"'s), and so does the text the query is embedded
    from: the mean of token vectors would otherwise pull the query toward every
    greeting. A word the memory does not hold at all ("lately") stays."""
    hobby = remember(tenant, user, ["Hi Samuel!", *FILLER, "My new hobby is pottery."])
    for _ in range(6):
        remember(tenant, user, ["Hi Samuel!", *FILLER])
    embedded: list[str] = []
    real = hybrid._query_vector

    def spy(query: str, embedder: Any) -> Any:
        embedded.append(query)
        return real(query, embedder)

    monkeypatch.setattr(hybrid, "_query_vector", spy)
    hits = found(tenant, "Which hobby did Samuel take up lately?", user=user, agent="build")
    assert hits[0] == hobby.pk
    assert embedded == ["Which hobby did take up lately?"]


def test_dense_query_keeps_the_whole_query_when_nothing_would_be_left():
    full = search.Lexical(dropped={"samuel"})
    assert search.dense_query("Samuel?", full) == "Samuel?"
    assert search.dense_query("Samuel's dog", full) == "'s dog"
    assert search.dense_query("Samuel's dog", search.Lexical()) == "Samuel's dog"


def test_without_words_drops_latin_words_by_their_token_and_keeps_cjk():
    from memory import text

    assert text.without_words("When did Zoë move to Porto?", {"zoe", "move"}) == (
        "When did to Porto?"
    )
    assert text.without_words("Tomás ZOË 去了哪里?", {"toma", "zoe"}) == "去了哪里?"
    assert text.without_words("Moving, moved, moves!", {"move"}) == ", , !"
    assert text.without_words("nothing dropped", set()) == "nothing dropped"
