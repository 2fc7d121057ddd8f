"""``manage.py reindex_memory``: after a change of embedding model, old vectors are never
compared, and the command re-embeds (idempotent, resumable, with clear exit codes)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from memory import selectors
from memory.models import MemorySlice, MemoryVectors

from .test_hybrid import FILLER, remember

pytestmark = pytest.mark.django_db

OLD = "test/hashed-trigrams@512"
NEW = "test/hashed-trigrams-v2@512"


def reindex(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("reindex_memory", "--json", *args, stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def found(tenant: Any, query: str) -> list[str]:
    return [hit.slice.pk for hit in selectors.search_slices(tenant=tenant, query=query)]


def models() -> list[tuple[str, str]]:
    return sorted(MemoryVectors.objects.values_list("slice_id", "model"))


@pytest.fixture
def espresso(tenant: Any, user: Any) -> MemorySlice:
    item = remember(tenant, user, ["I drank an espresso this morning."])
    remember(tenant, user, FILLER)
    return item


def test_a_new_model_never_compares_old_vectors_until_reindexed(tenant, espresso, settings):
    assert found(tenant, "latte")[0] == espresso.pk  # by meaning, with the old model
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.renamed"
    # The same numbers under another name: never compared. Full text still answers.
    assert espresso.pk not in found(tenant, "latte")
    assert found(tenant, "espresso") == [espresso.pk]

    report = reindex()
    assert report["model"] == NEW
    assert (report["embedded"], report["left"], report["error"]) == (2, 0, None)
    assert {model for _, model in models()} == {NEW}  # the old vectors went
    assert found(tenant, "latte")[0] == espresso.pk

    rows = list(MemoryVectors.objects.order_by("id").values_list("id", "slice_id", "model"))
    again = reindex()
    assert (again["embedded"], again["left"], again["removed"]) == (0, 0, 0)
    assert list(MemoryVectors.objects.order_by("id").values_list("id", "slice_id", "model")) == rows


def test_slices_left_without_vectors_are_embedded(tenant, user, settings):
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.down"
    item = remember(tenant, user, ["I drank an espresso this morning."])
    assert not MemoryVectors.objects.exists()
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.hashed"
    assert found(tenant, "latte") == []
    assert reindex()["embedded"] == 1
    assert models() == [(item.pk, OLD)]
    assert found(tenant, "latte") == [item.pk]


def test_a_run_stopped_by_the_embedder_keeps_its_batches_and_the_next_goes_on(
    tenant, user, settings
):
    made = [remember(tenant, user, [f"Note {n} about the espresso."]) for n in range(3)]
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.flaky"  # NEW, then down
    with pytest.raises(CommandError, match="the embedder failed after 1 slices") as info:
        reindex("--batch", "1")
    assert info.value.returncode == 1
    assert [model for _, model in models()].count(NEW) == 1  # the first batch stayed
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.renamed"
    report = reindex("--batch", "1")
    assert (report["embedded"], report["left"]) == (2, 0)
    assert models() == sorted((item.pk, NEW) for item in made)


def test_ctrl_c_keeps_its_batches_and_says_what_is_left(tenant, user, settings, monkeypatch):
    """It ended in a KeyboardInterrupt traceback."""
    from memory import vectors

    [remember(tenant, user, [f"Note {n} about the espresso."]) for n in range(3)]
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.renamed"
    calls = 0
    real = vectors.store

    def interrupted(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(vectors, "store", interrupted)
    with pytest.raises(CommandError, match="interrupted; 2 slices still need vectors") as info:
        reindex("--batch", "1")
    assert info.value.returncode == 130
    monkeypatch.setattr(vectors, "store", real)
    assert (reindex("--batch", "1")["embedded"], reindex()["left"]) == (2, 0)


def test_core_and_fulltext(tenant, user, settings, espresso):
    other = remember(tenant, user, ["An espresso for the explorer."], agent="explore")
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.renamed"
    report = reindex("--core", other.unit.core_id, "--fulltext")
    assert (report["embedded"], report["fulltext"], report["core"]) == (1, 1, other.unit.core_id)
    assert dict(models())[other.pk] == NEW
    assert dict(models())[espresso.pk] == OLD  # another core: untouched
    assert set(found(tenant, "espresso")) == {espresso.pk, other.pk}  # rebuilt, still found


def test_the_text_report(tenant, espresso):
    out = io.StringIO()
    call_command("reindex_memory", stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith(f"every core: 0 slices embedded with {OLD}, 0 left, in ")


@pytest.mark.parametrize(
    ("args", "embedder", "message"),
    [
        (["--core", "mco_nope"], None, "no memory core 'mco_nope'"),
        (["--batch", "0"], None, "--batch must be from 1"),
        ([], "tests.memory.embedders.no_such_factory", "no embedder"),
        ([], "tests.memory.embedders.broken_factory", "no embedder"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(espresso, settings, args, embedder, message):
    if embedder:
        settings.FORGE_MEMORY_EMBEDDER = embedder
    before = models()
    with pytest.raises(CommandError, match=message) as info:
        reindex(*args)
    assert info.value.returncode == 2
    assert models() == before


def test_an_embedder_that_cannot_be_reached_to_name_its_model_is_a_clear_error(espresso, settings):
    """A third-round finding: an OpenAI-compatible embedder with no set dimension asks
    the server for it to name its model; a server that was down made that a 28-line
    traceback with nothing on stdout."""
    settings.FORGE_MEMORY_EMBEDDER = ""
    settings.FORGE_EMBEDDING_MODEL = "openai/text-embedding-3-small"
    settings.FORGE_EMBEDDING_DIMENSIONS = None
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"  # nothing listens
    settings.FORGE_EMBEDDING_TIMEOUT = 2
    out = io.StringIO()
    with pytest.raises(CommandError, match="the embedder could not be reached") as info:
        call_command("reindex_memory", "--json", stdout=out, stderr=io.StringIO())
    assert info.value.returncode == 1
    report = json.loads(out.getvalue())
    assert (report["embedded"], report["error"]["code"]) == (0, "embedding_unavailable")


def test_fulltext_goes_on_past_a_slice_deleted_during_the_run(tenant, user, espresso, monkeypatch):
    """A slice deleted while ``--fulltext`` rebuilds it (an operator deleting a core, a
    user leaving) stopped the rebuild there: the slices after it were never rebuilt, and
    the report said done, exit 0 (QA)."""
    from memory import search

    remember(tenant, user, ["An espresso for the explorer."], agent="explore")
    real = search.index_fulltext

    def deleting_the_first(docs: Any, **kwargs: Any) -> int:
        done = real(docs, **kwargs)
        if docs[0].slice_id == espresso.pk:
            MemorySlice.objects.filter(pk=espresso.pk).delete()
        return done

    monkeypatch.setattr(search, "index_fulltext", deleting_the_first)
    report = reindex("--fulltext", "--batch", "1")
    assert report["fulltext"] == 3  # the deleted one, then the two after it


def test_with_vectors_off_fulltext_is_rebuilt_without_the_embedder(espresso, settings):
    """QA (LOW): with ``FORGE_MEMORY_VECTORS`` off (full text only, nothing embedded) the
    command still built the embedder first: with none reachable, ``--fulltext`` rebuilt
    nothing and said "no embedder" (exit 2); with the offline one, it embedded every
    slice for nothing. It now rebuilds the full text and says that nothing is embedded."""
    settings.FORGE_MEMORY_VECTORS = False
    settings.FORGE_MEMORY_EMBEDDER = "tests.memory.embedders.broken_factory"
    before = models()
    err = io.StringIO()
    out = io.StringIO()
    call_command("reindex_memory", "--json", "--fulltext", stdout=out, stderr=err)
    report = json.loads(out.getvalue())
    assert (report["fulltext"], report["embedded"], report["model"]) == (2, 0, None)
    assert "FORGE_MEMORY_VECTORS" in err.getvalue()
    assert models() == before


def test_fulltext_is_rebuilt_when_the_embedder_cannot_be_reached(espresso, settings):
    """QA (LOW): the full-text rebuild needs no embedder, but an unreachable one (an
    OpenAI-compatible server without a set dimension is asked its model's first) stopped
    ``--fulltext`` before it rebuilt anything."""
    settings.FORGE_MEMORY_EMBEDDER = ""
    settings.FORGE_EMBEDDING_MODEL = "openai/text-embedding-3-small"
    settings.FORGE_EMBEDDING_DIMENSIONS = None
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"  # nothing listens
    settings.FORGE_EMBEDDING_TIMEOUT = 2
    out = io.StringIO()
    with pytest.raises(CommandError, match="full text rebuilt for 2") as info:
        call_command("reindex_memory", "--json", "--fulltext", stdout=out, stderr=io.StringIO())
    assert info.value.returncode == 1
    report = json.loads(out.getvalue())
    assert (report["fulltext"], report["embedded"]) == (2, 0)
    assert report["error"]["code"] == "embedding_unavailable"
