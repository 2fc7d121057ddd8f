"""The memory recall benchmark (``bench/memory_recall.py``) and its dataset.

The dataset is checked for what the benchmark's numbers rest on: the same seed gives
the same conversations; each is long, dated and two-sided; every question's evidence
points at messages that really hold its answer. The tokenizer and the LoCoMo reader are
checked on small cases, and a quick run on SQLite must print every table. Recall and
timings are never asserted: only that they were measured and put where they belong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[ModuleType, ModuleType]]:
    sys.path.insert(0, str(BENCH))
    try:
        import bm25
        import memory_data

        yield memory_data, bm25
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def samples(bench: tuple[ModuleType, ModuleType]) -> list[dict[str, Any]]:
    memory_data, _ = bench
    return memory_data.generate(seed=3, conversations=4)


def test_the_same_seed_gives_the_same_conversations_and_another_seed_others(bench, samples):
    memory_data, _ = bench
    assert json.dumps(memory_data.generate(seed=3, conversations=4)) == json.dumps(samples)
    assert json.dumps(memory_data.generate(seed=4, conversations=4)) != json.dumps(samples)


def test_conversations_are_long_dated_two_sided_and_in_both_languages(bench, samples):
    memory_data, _ = bench
    dialogues = memory_data.dialogues(samples)
    assert [d.language for d in dialogues] == ["en", "zh", "en", "zh"]
    for sample, dialogue in zip(samples, dialogues, strict=True):
        sessions = {m["session"] for m in dialogue.messages}
        assert len(sessions) >= 19
        assert len(dialogue.messages) >= 400
        assert {m["role"] for m in dialogue.messages} == {"user", "assistant"}
        times = [m["at"] for m in dialogue.messages]
        assert times == sorted(times)
        assert len(dialogue.questions) >= 30
        assert {q.kind for q in dialogue.questions} == {"single", "multi", "temporal"}
        if dialogue.language == "zh":  # real Chinese: no spaces between words
            assert not [m["text"] for m in dialogue.messages if " " in m["text"]]
            assert not [q.text for q in dialogue.questions if " " in q.text]
        # The sample has LoCoMo's shape: sessions with times, turns with dia ids.
        conversation = sample["conversation"]
        assert memory_data.session_time(conversation["session_1_date_time"])
        assert conversation["session_1"][0]["dia_id"] == "D1:1"


def test_every_answer_is_in_its_evidence_and_no_question_copies_it(bench, samples):
    """A question is only as good as its evidence positions: the answer (a planted value)
    is found in the evidence messages. Temporal answers are computed from the session's
    date, and "why" answers are paraphrased, so those two are not looked for."""
    memory_data, bm25 = bench
    checked = 0
    for dialogue in memory_data.dialogues(samples):
        for q in dialogue.questions:
            evidence = " ".join(dialogue.messages[p]["text"] for p in q.evidence)
            assert q.text not in evidence
            if q.kind == "temporal" or q.fact.endswith(".why"):
                continue
            if dialogue.language == "zh":
                assert q.answer in evidence, (q.text, q.answer, evidence)
            else:
                words = set(bm25.tokens(q.answer)) - {"his", "her", "the", "a", "an"}
                assert words <= set(bm25.tokens(evidence)), (q.text, q.answer, evidence)
            checked += 1
    assert checked > 80


def test_distractors_mention_the_facts_entities_outside_their_evidence(bench, samples):
    """Keyword matching is not trivially perfect: most facts' key values (places,
    companies, breeds …) also appear in messages that are not evidence."""
    memory_data, _ = bench
    dialogue = memory_data.dialogues(samples[:1])[0]
    evidence = {p for q in dialogue.questions for p in q.evidence}
    answers = {q.answer for q in dialogue.questions if q.kind == "single" and len(q.answer) > 4}
    elsewhere = [
        a
        for a in answers
        if any(a in m["text"] for i, m in enumerate(dialogue.messages) if i not in evidence)
    ]
    assert len(elsewhere) >= len(answers) / 3, (elsewhere, answers)


def test_tokens_fold_accents_and_cut_cjk_into_unigrams_and_bigrams(bench):
    _, bm25 = bench
    assert bm25.tokens("Trip to MÁLAGA, São Paulo!") == [
        "trip",
        "to",
        "malaga",
        "sao",
        "paulo",
    ]
    cjk = bm25.tokens("我昨天喝了咖啡")
    assert {"咖啡", "咖", "我昨"} <= set(cjk)
    assert bm25.tokens("咖啡") == ["咖", "啡", "咖啡"]
    assert bm25.tokens("ヒーロー、커피 test_case") == [
        "ヒ", "ー", "ロ", "ー", "ヒー", "ーロ", "ロー", "커", "피", "커피", "test", "case",
    ]  # fmt: skip


def test_bm25_ranks_the_document_holding_the_rare_query_word_first(bench):
    _, bm25 = bench
    docs = [["coffee", "tea"], ["tea", "cake", "tea"], ["we", "drank", "espresso", "coffee"]]
    index = bm25.BM25(docs)
    assert index.top(["espresso", "coffee"], 10) == [2, 0]
    assert index.top(["nothing"], 10) == []


def test_a_locomo_file_is_read_with_its_evidence_resolved(bench, tmp_path):
    memory_data, _ = bench
    sample = {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel!"},
                {"speaker": "Melanie", "dia_id": "D1:2", "text": "Hi!"},
                {"speaker": "Caroline", "dia_id": "D1:3", "text": "I went to a support group."},
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {
                    "speaker": "Melanie",
                    "dia_id": "D2:1",
                    "text": "Look!",
                    "img_url": ["https://example.com/x.jpg"],
                    "blip_caption": "a photo of a painted sunrise",
                },
            ],
        },
        "qa": [
            {"question": "When did Caroline go?", "answer": "7 May 2023", "evidence": ["D1:3"],
             "category": 2},
            {"question": "What did Melanie paint?", "answer": "a sunrise",
             "evidence": ["D2:1; D1:2"], "category": 1},
            {"question": "What did Caroline paint?", "adversarial_answer": "a sunrise",
             "evidence": ["D2:1"], "category": 5},
            {"question": "Lost?", "answer": "x", "evidence": ["D9:9"], "category": 4},
        ],
    }  # fmt: skip
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    (dialogue,) = memory_data.dialogues(memory_data.load(path))
    assert dialogue.language == "en"
    assert [m["role"] for m in dialogue.messages] == ["user", "assistant", "user", "assistant"]
    assert dialogue.messages[0]["at"] == "2023-05-08T13:56:00+00:00"
    assert dialogue.messages[3]["text"] == "Look! [shares a photo of a painted sunrise]"
    assert [(q.text, q.evidence, q.kind) for q in dialogue.questions] == [
        ("When did Caroline go?", (2,), "temporal"),
        ("What did Melanie paint?", (1, 3), "multi"),
    ]


@pytest.mark.sqlite_only  # the benchmark makes its own databases: the server pass would repeat it
@pytest.mark.timeout(300)
def test_quick_run_rolls_searches_and_prints_every_table(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "DJANGO_"))}
    out = tmp_path / "runs.json"
    done = subprocess.run(
        [
            sys.executable, "bench/memory_recall.py", "--quick", "--sizes", "40",
            "--queries", "5", "--json", str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in done.stdout.splitlines()
        if line.startswith("| sqlite")
    ]
    recall = {(r[1], r[2]): r for r in rows if r[2] in ("en", "zh", "all")}
    for retriever in ("summary BM25", "raw BM25", "search_slices"):
        for language in ("en", "zh", "all"):
            cells = [float(c) for c in recall[(retriever, language)][4:8]]
            assert all(0 <= c <= 1 for c in cells)
            assert cells == sorted(cells)  # recall@k grows with k
    latency = [r for r in rows if r[1] == "40"]
    assert len(latency) == 1
    assert all(float(c) >= 0 for c in latency[0][3:])
    (run,) = json.loads(out.read_text())
    assert len(run["questions"]) >= 60
    assert run["stats"]["messages"] >= 800


def test_database_url_names_the_scratch_database_but_never_postgres_itself(bench, monkeypatch):
    import memory_recall

    monkeypatch.setattr(memory_recall, "BENCH_DB", "forge_bench_recall")
    server = "postgres://postgres@127.0.0.1:5432"
    assert memory_recall.scratch_database(f"{server}/forge_recall_bench") == f"{server}/postgres"
    assert memory_recall.BENCH_DB == "forge_recall_bench"
    for kept in (f"{server}/postgres", f"{server}/template1", f"{server}/"):
        monkeypatch.setattr(memory_recall, "BENCH_DB", "forge_bench_recall")
        assert memory_recall.scratch_database(kept) == f"{server}/postgres"
        assert memory_recall.BENCH_DB == "forge_bench_recall"


def test_shares_word_reads_words_as_the_product_cuts_them(bench):
    import memory_recall

    shares = memory_recall.shares_word
    assert shares("Which city did Nora visit?", ["We loved the city at night."])
    assert shares("Where is Owen relocating?", ["No.", "They relocated to Denver."])  # stems
    assert not shares("What did Owen put in the yard?", ["I planted basil in the backyard."])
    assert not shares("What is the weather like?", ["It is what it is."])  # stop words only
    assert shares("李娜的烘焙课是谁教的", ["老师叫婉婷 烘焙很好玩"])  # 烘焙, a pair
    assert not shares("他喝了什么", ["咖啡了"])  # 了 alone is no pair
