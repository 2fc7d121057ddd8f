"""The history digest (``memory.digest``): the dialog_history block stands for every
rolled turn, however long the chat.

A QA finding (HIGH): the block held the core's newest slices only (8, within 4,000
characters), so after enough rollings the oldest rolled turns of a long chat were shown
to the model neither raw (the trim hides them) nor summarized. Now every rolling folds
what the block has no room for into the core's digest, which the block shows first.
"""

from __future__ import annotations

from typing import Any

import pytest

from memory import digest, selectors, services
from memory.extractive import SUMMARY_CHARS
from memory.models import MemoryCore, MemorySlice
from memory.wire import HISTORY_DIGEST_HEAD, HISTORY_HEAD, HISTORY_HEAD_OLDER

from .conftest import roll_committed

pytestmark = pytest.mark.django_db

# Planted in the first turns: what a question asks about, long after they left the block.
FACTS = [
    [
        {"role": "user", "text": "Hi there! My sister Clara moved to Lisbon in March 2019."},
        {"role": "assistant", "text": "Lisbon is lovely. How is Clara finding it?"},
    ],
    [
        {"role": "user", "text": "Good. Our dog is called Biscuit, he is 7 years old."},
        {"role": "assistant", "text": "Biscuit sounds like a great companion."},
    ],
]


def chat(tenant: Any, user: Any, turns: list[list[dict[str, Any]]]) -> MemoryCore:
    core = None
    for messages in turns:
        core = services.append_dialogue(tenant=tenant, user=user, agent="build", messages=messages)
    assert core is not None
    return core


def filler(first: int, count: int) -> list[list[dict[str, Any]]]:
    return [
        [
            {"role": "user", "text": f"Question {i} about topic{i}. More detail here."},
            {"role": "assistant", "text": f"Answer {i} on topic{i}. Further words."},
        ]
        for i in range(first, first + count)
    ]


def block_of(tenant: Any, core: MemoryCore) -> dict[str, Any]:
    block = selectors.dialog_history_block(tenant=tenant, core=MemoryCore.objects.get(pk=core.pk))
    assert block is not None
    return block


def long_chat(tenant: Any, user: Any, rollings: int) -> MemoryCore:
    """The facts, then filler, rolled ``rollings`` times (a slice of ~3 turns each)."""
    core = chat(tenant, user, FACTS)
    for i in range(rollings):
        chat(tenant, user, filler(10 * i, 3))
        roll_committed(core)
    return core


def every_slice_once(tenant: Any, core: MemoryCore, block: dict[str, Any]) -> None:
    """Each slice of the core is on its own line of the block or in the digest, never
    both and never neither."""
    slices = MemorySlice.objects.filter(unit__core=core)
    shown = set(block["slice_ids"])
    digested = set(slices.filter(digested=True).values_list("pk", flat=True))
    assert shown.isdisjoint(digested)
    assert shown | digested == set(slices.values_list("pk", flat=True))


def test_the_oldest_rolled_facts_stay_in_the_block(tenant, user, settings):
    settings.FORGE_MEMORY_HISTORY_SLICES = 2
    core = long_chat(tenant, user, rollings=8)
    block = block_of(tenant, core)
    text = block["text"]
    assert text.startswith(HISTORY_HEAD + "\n\n[until ")  # no "older dialogue is not here"
    assert HISTORY_DIGEST_HEAD in text
    assert "Lisbon" in text  # from the first slice, long folded
    assert "Biscuit" in text
    assert len(block["slice_ids"]) == 2
    newest = MemorySlice.objects.filter(unit__core=core).order_by("-created_at", "-id")[:2]
    assert block["slice_ids"] == [s.pk for s in reversed(newest)]
    assert block["digest_at"] is not None
    every_slice_once(tenant, core, block)
    # The digest comes before the slices it is older than.
    assert text.index("Lisbon") < text.index(block_line(block["slice_ids"][0]))


def block_line(slice_id: str) -> str:
    return MemorySlice.objects.get(pk=slice_id).summary.splitlines()[0]


def test_the_block_stays_within_its_character_budget(tenant, user, settings):
    settings.FORGE_MEMORY_HISTORY_CHARS = 900
    core = long_chat(tenant, user, rollings=12)
    block = block_of(tenant, core)
    assert len(block["text"]) <= 900  # its first line included
    assert len(MemoryCore.objects.get(pk=core.pk).history_digest or "") <= digest.digest_chars()
    assert block["text"].startswith(HISTORY_HEAD + "\n\n")
    assert "Lisbon" in block["text"]
    every_slice_once(tenant, core, block)


def test_a_short_chat_has_no_digest(tenant, user):
    core = long_chat(tenant, user, rollings=3)
    block = block_of(tenant, core)
    assert HISTORY_DIGEST_HEAD not in block["text"]
    assert block["digest_at"] is None
    assert MemoryCore.objects.get(pk=core.pk).history_digest is None
    assert not MemorySlice.objects.filter(digested=True).exists()


def test_a_failed_fold_leaves_the_rolling_and_says_older_is_missing(
    tenant, user, settings, monkeypatch
):
    settings.FORGE_MEMORY_HISTORY_SLICES = 2

    def broken(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("the digest broke")

    monkeypatch.setattr(digest, "condense", broken)
    core = long_chat(tenant, user, rollings=4)
    assert MemorySlice.objects.filter(unit__core=core).count() == 4  # every rolling landed
    assert block_of(tenant, core)["text"].startswith(HISTORY_HEAD_OLDER)
    monkeypatch.undo()
    # The next rolling folds all that was left out.
    chat(tenant, user, filler(100, 3))
    roll_committed(core)
    block = block_of(tenant, core)
    assert block["text"].startswith(HISTORY_HEAD + "\n\n[until ")
    assert "Lisbon" in block["text"]
    every_slice_once(tenant, core, block)


def test_folding_twice_changes_nothing(tenant, user, settings):
    settings.FORGE_MEMORY_HISTORY_SLICES = 2
    core = long_chat(tenant, user, rollings=5)
    before = MemoryCore.objects.get(pk=core.pk).history_digest
    assert digest.condense_history(tenant_id=tenant.pk, core_id=core.pk) == 0
    assert MemoryCore.objects.get(pk=core.pk).history_digest == before


def test_condense_keeps_speakers_facts_and_the_budget(settings):
    settings.FORGE_MEMORY_HISTORY_CHARS = 600  # a budget of 200
    summaries = [
        "user: My sister Clara moved to Lisbon in March 2019.\nassistant: Lovely.",
        "A prose summary: they booked a flight to Tokyo for 3 June.",
        "user: 我叫李娜\uff0c我住在上海市\u3002",
    ]
    text = digest.condense(None, summaries)
    assert len(text) <= digest.digest_chars() <= SUMMARY_CHARS
    assert "user: My sister Clara moved to Lisbon in March 2019." in text.splitlines()
    assert any(line.startswith("A prose summary") or "Tokyo" in line for line in text.splitlines())
    assert "上海市" in text
    # The earlier digest is read with the new summaries, in its place: first.
    again = digest.condense(text, ["user: We will meet Tom at 7 pm on Friday."])
    assert again.index("Lisbon") < again.index("Tom")


def test_within_a_sweep_the_cores_are_folded_in_a_batch(tenant, user, settings, monkeypatch):
    """``roll_dialogs``' sweeps check their rolled cores together (``digest.batched``): one
    query for a batch, the folds when it is flushed, and all of it before the sweep ends."""
    settings.FORGE_MEMORY_HISTORY_SLICES = 2
    monkeypatch.setattr(digest, "BATCH_SECONDS", 3600.0)
    core = chat(tenant, user, FACTS)
    with digest.batched():
        for i in range(5):
            chat(tenant, user, filler(10 * i, 3))
            roll_committed(core)
        assert not MemorySlice.objects.filter(digested=True).exists()  # waiting in the batch
        assert block_of(tenant, core)["text"].startswith(HISTORY_HEAD_OLDER)
    block = block_of(tenant, core)
    assert block["text"].startswith(HISTORY_HEAD + "\n\n[until ")
    assert "Lisbon" in block["text"]
    every_slice_once(tenant, core, block)


def test_the_budget_holds_the_whole_text_its_first_line_too(tenant, user, settings):
    """The first line ("Summaries of the earlier dialogue …") was not counted: the text
    could exceed ``FORGE_MEMORY_HISTORY_CHARS`` by it."""
    core = long_chat(tenant, user, rollings=6)
    newest = max(len(s.summary) for s in MemorySlice.objects.filter(unit__core=core)) + 30
    exceeded = []
    for budget in range(newest + len(HISTORY_HEAD_OLDER) + 2, 2000, 7):
        settings.FORGE_MEMORY_HISTORY_CHARS = budget
        if len(block_of(tenant, core)["text"]) > budget:
            exceeded.append(budget)
    assert exceeded == []


def test_slices_written_without_a_rolling_are_folded_too(tenant, user, settings):
    """A QA finding: the digest ran after rollings only, so slices a plugin wrote
    (``update_memory_unit``) or an import restored (``restore_unit``, a unit older than
    the core's by its ``updated_at``) pushed slices out of the block, shown neither on
    their own line nor in the digest, until the core's next rolling."""
    from django.test import TestCase

    settings.FORGE_MEMORY_HISTORY_SLICES = 2
    core = long_chat(tenant, user, rollings=3)
    with TestCase.captureOnCommitCallbacks(execute=True):
        for i in range(3):
            services.update_memory_unit(
                tenant=tenant,
                core=MemoryCore.objects.get(pk=core.pk),
                messages=[{"role": "user", "text": f"plugin {i}"}],
                summary=f"user: plugin note {i}.",
            )
    block = block_of(tenant, core)
    assert block["text"].startswith(HISTORY_HEAD + "\n\n[until ")
    every_slice_once(tenant, core, block)
    old = "2020-01-01T00:00:00.000Z"
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.restore_unit(
            tenant=tenant,
            core=MemoryCore.objects.get(pk=core.pk),
            unit={
                "memory_session_id": "mss_restored",
                "updated_at": old,
                "conversation_messages": [
                    {"role": "user", "text": "My cat Zorro likes tuna.", "at": old}
                ],
                "slices": [
                    {
                        "start_index": 0,
                        "end_index": 1,
                        "summary": "user: My cat Zorro likes tuna.",
                        "created_at": old,
                    }
                ],
            },
        )
    block = block_of(tenant, core)
    assert "Zorro" in block["text"]  # folded: the restored unit is the core's oldest
    every_slice_once(tenant, core, block)


def test_the_batch_check_measures_lines_as_the_block_writes_them(tenant, user):
    """A sweep's check reads the lengths of the summaries, not the summaries: a line's
    length must be the one ``wire.history_line`` gives (CJK counts a character each)."""
    from memory.digest import _line, _not_digested_of
    from memory.wire import history_line

    core = chat(tenant, user, FACTS)
    chat(tenant, user, [[{"role": "user", "text": "我叫李娜\u3002我住在上海市\u3002"}]])
    roll_committed(core, force=True)
    [measured] = _not_digested_of([core.pk])[core.pk]
    assert _line(measured) == len(history_line(MemorySlice.objects.get(pk=measured.pk)))


def test_a_fold_with_no_sentence_that_fits_says_how_many_within_the_budget():
    from memory.digest import _counted

    assert _counted(None, 3) == "(3 earlier summaries)"
    assert _counted("user: Clara lives in Lisbon.", 2).endswith("\n(2 earlier summaries)")
    assert _counted("x" * digest.digest_chars(), 4) == "(4 earlier summaries)"
