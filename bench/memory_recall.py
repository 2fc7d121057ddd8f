"""Memory recall and search latency: does search find the slice that holds what was said?

**Dataset.** ``--conversations`` (default 10) long two-person conversations generated
from ``--seed`` by ``bench/memory_data`` (English and Chinese alternately; ~20 dated
sessions and ~450-500 messages each; planted facts, dates, numbers, names, places and
preferences among everyday talk that reuses their words; ~34 questions each whose
evidence messages are known, phrased in other words than the evidence: single-hop,
temporal, multi-hop). ``--dataset FILE`` reads a file of LoCoMo's shape instead (the
public benchmark's ``locomo10.json``; adversarial questions are left out). ``--dump
FILE`` writes the generated set in that shape and exits.

**Rolling, as the product does.** Each conversation goes into a fresh core (one
user, an agent per conversation) through ``memory.services.append_dialogue``, one
turn at a time (a ``user`` message and the ``assistant`` messages after it; speaker A
is the user) with the session's times, and ``memory.services.roll_core(force=False)``
after every turn (it rolls when due: ``FORGE_MEMORY_ROLL_THRESHOLD`` = 40 messages,
keeping ``FORGE_MEMORY_ROLL_KEEP`` = 8), then one idle rolling at the end
(``memory.rolling.roll`` with a ``now`` past ``FORGE_MEMORY_IDLE_AFTER``), so every
message ends in a slice of ~32. ``--idle-sessions`` also rolls idle at the end of
every session (what ``roll_dialogs --loop`` does when sessions are days apart). The
summarizer is ``memory.summarizers.extractive`` (offline); the AfterRolling consumers
(the search index) run as after any rolling.

**Retrievers, in one run,** each giving the top 10 slices of the conversation's core:

* ``summary BM25``: BM25 over the slices' summaries (the index of today's search);
* ``raw BM25``: BM25 over the same slices' raw messages (a slice's text is its range's
  messages joined);
* ``search_slices``: the product, ``memory.selectors.search_slices(tenant, query,
  user, agent, limit=10)``, whatever it is on this branch.

BM25 is the bench's own (``bench/bm25.py``: k1 = 1.2, b = 0.75,
idf = ln(1 + (N - n + 0.5) / (n + 0.5)), each distinct query token once), with one
tokenizer for every language: text
lower-cased and accents folded (NFKD, combining marks dropped); a run of Latin letters
or digits is one token; a run of CJK characters (Han, kana, hangul) gives each
character and each pair of neighbours (unigrams + bigrams), so Chinese is matched
without spaces; no stemming and no stop words. A question is **recalled at k** when
one of the first k slices' ``[start_index, end_index)`` of its unit holds one of the
question's evidence messages.

**Word-sharing split.** Recall@5 is also printed apart for the questions that share a
word with an evidence message, as the product's full text cuts words (stemmed, stop
words out; CJK: a character pair), and those that share none, which only meaning can
find (``shares_word``; the ``--json`` file says it per question): what full text can
still gain, and what is left to the dense vectors and query expansion.

**Latency.** ``search_slices`` in one core holding 100 and 10,000 slices
(``--sizes``) of ~32 messages each, written with ``memory.services.restore_unit``
(a unit per generated conversation, summaries by the configured summarizer) and
indexed by :func:`index_core` (the product's indexing step; timed). Then the cold
first query (a new database connection: SQLite's page cache empty, the OS's warm)
and ``--queries`` (200) warm queries drawn from the dataset's questions, after 10
unrecorded ones: p50, p99. A slow search stops early, after ``--time-limit`` (120)
seconds of warm queries (at least 2 are measured); the table says how many ran.

    python bench/memory_recall.py [--seed 7] [--conversations 10] [--quick]
                                  [--sizes 100,10000] [--queries 200] [--time-limit 120]
                                  [--idle-sessions]
                                  [--dataset locomo10.json] [--dump FILE] [--json FILE]
                                  [--engines sqlite] [--database-url postgres://…]

``--quick``: 2 conversations, sizes 100 and 1,000, 50 queries (a smoke run).
``--database-url``: run on that PostgreSQL server instead, like ``--engines postgres
--postgres-url URL``. The scratch database created there and dropped is the URL's own
database name (``…/forge_recall_bench``), created through the server's ``postgres``
database; with no name, or ``postgres`` itself, it is ``FORGE_BENCH_DB``
(``forge_bench_recall``), so two runs on one server can keep apart.

Aims (issue 18): ``search_slices`` recall@5 >= 0.90 and >= raw BM25, in each
language; p99 <= 50 ms at 10,000 slices.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from bm25 import BM25, tokens
from memory_data import Dialogue, dialogues, generate, load
from table import engine_arguments, per_engine, print_table, start_django

BENCH_DB = os.environ.get("FORGE_BENCH_DB", "forge_bench_recall")  # the scratch database
KS = (1, 3, 5, 10)
LIMIT = 10
SLICE_MESSAGES = 32  # what default rolling gives: threshold 40 - keep 8
WARM_UP = 10
RETRIEVERS = ("summary BM25", "raw BM25", "search_slices")
LANGUAGES = ("en", "zh")
KINDS = ("single", "multi", "temporal", "open")

# --- rolling a conversation into a core ---------------------------------------------------


@dataclass(frozen=True)
class Slice:
    id: str
    unit_id: str
    start: int
    end: int
    summary: str
    raw: str

    def holds(self, where: set[tuple[str, int]]) -> bool:
        return any(u == self.unit_id and self.start <= i < self.end for u, i in where)


def turns(messages: list[dict[str, Any]]) -> Iterator[tuple[list[dict[str, Any]], bool]]:
    """The dialogue as the runtime appends it: a user message with the replies after it;
    a session's first reply with no user message before it is a turn alone. Yields each
    turn and whether it ends its session."""
    turn: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if turn and (message["role"] == "user" or message["session"] != turn[0]["session"]):
            yield turn, turn[-1]["session"] != message["session"]
            turn = []
        turn.append(message)
        if i == len(messages) - 1:
            yield turn, True


def roll_dialogue(
    dialogue: Dialogue, *, tenant: Any, user: Any, agent: str, idle_sessions: bool
) -> tuple[Any, list[Slice], list[tuple[str, int]]]:
    """Load and roll ``dialogue`` as the product would (see the docstring). Returns the
    core, its slices, and where each message of the dialogue ended up (unit, index)."""
    from memory import selectors, services
    from memory.models import MemoryMessage, MemorySlice
    from memory.rolling import RollingOptions, roll
    from memory.times import now_ms

    options = RollingOptions.build()
    core = None

    def idle_roll() -> None:
        assert core is not None
        later = now_ms() + options.idle_after + timedelta(seconds=1)
        outcome = roll(core.pk, options=options, now=later)
        if outcome.status not in ("rolled", "not_due"):
            raise RuntimeError(f"idle rolling of {core.pk}: {outcome.wire()}")

    for turn, ends_session in turns(dialogue.messages):
        rows = [{"role": m["role"], "text": m["text"], "at": m["at"]} for m in turn]
        core = services.append_dialogue(tenant=tenant, user=user, agent=agent, messages=rows)
        outcome = services.roll_core(tenant=tenant, core=core, force=False)
        if outcome.status not in ("rolled", "not_due"):
            raise RuntimeError(f"rolling of {core.pk}: {outcome.wire()}")
        if idle_sessions and ends_session:
            idle_roll()
    idle_roll()
    assert core is not None

    units = selectors.unit_ids(tenant=tenant, core=core)
    placed: list[tuple[str, int]] = []
    texts: dict[str, list[str]] = {}
    for unit_id in units:
        stored_rows = MemoryMessage.objects.filter(unit_id=unit_id).order_by("index")
        texts[unit_id] = list(stored_rows.values_list("text", flat=True))
        placed += [(unit_id, i) for i in range(len(texts[unit_id]))]
    stored = [texts[u][i] for u, i in placed]
    if stored != [m["text"] for m in dialogue.messages]:
        raise RuntimeError(f"{dialogue.sample_id}: the units do not hold the dialogue in order")
    slices = [
        Slice(s.pk, s.unit_id, s.start_index, s.end_index, s.summary,
              "\n".join(texts[s.unit_id][s.start_index : s.end_index]))
        for s in MemorySlice.objects.filter(unit_id__in=units).order_by("unit_id", "start_index")
    ]  # fmt: skip
    covered = {(s.unit_id, i) for s in slices for i in range(s.start, s.end)}
    if len(covered) != len(placed):
        raise RuntimeError(
            f"{dialogue.sample_id}: {len(placed) - len(covered)} messages in no slice"
        )
    return core, slices, placed


# --- recall ----------------------------------------------------------------------------------


def first_hit(ranked: Sequence[Slice], where: set[tuple[str, int]]) -> int | None:
    """The rank (1 = best) of the first slice holding an evidence message, if any."""
    return next((rank for rank, s in enumerate(ranked, 1) if s.holds(where)), None)


def shares_word(question: str, evidence: Sequence[str]) -> bool:
    """Whether the question and one of its evidence messages share a word, as the product's
    full text sees words (``memory.text``: stemmed, English stop words out); for CJK, a
    character pair (a shared single character, "了" or "的", says nothing). A question
    sharing none can be found by meaning only (dense vectors, query expansion)."""
    from memory import text

    asked = {t for t in text.query_tokens(question) if not (text.has_cjk(t) and len(t) < 2)}
    return any(asked & set(text.tokens(message)) for message in evidence)


def measure_recall(
    sets: list[Dialogue], *, tenant: Any, user: Any, idle_sessions: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from memory import selectors
    from memory.exceptions import MemoryStoreError

    results: list[dict[str, Any]] = []
    stats = Counter[str]()
    for n, dialogue in enumerate(sets):
        started = time.perf_counter()
        agent = f"recall-{n}"
        _, slices, placed = roll_dialogue(
            dialogue, tenant=tenant, user=user, agent=agent, idle_sessions=idle_sessions
        )
        stats["rolling_s_x1000"] += round((time.perf_counter() - started) * 1000)
        stats["messages"] += len(placed)
        stats["slices"] += len(slices)
        stats[f"conversations_{dialogue.language}"] += 1
        by_id = {s.id: s for s in slices}
        summary = BM25([tokens(s.summary) for s in slices])
        raw = BM25([tokens(s.raw) for s in slices])
        for question in dialogue.questions:
            where = {placed[p] for p in question.evidence}
            query = tokens(question.text)
            ranked: dict[str, list[Slice]] = {
                "summary BM25": [slices[i] for i in summary.top(query, LIMIT)],
                "raw BM25": [slices[i] for i in raw.top(query, LIMIT)],
            }
            try:
                hits = selectors.search_slices(
                    tenant=tenant, query=question.text, user=user, agent=agent, limit=LIMIT
                )
                ranked["search_slices"] = [by_id[h.slice.pk] for h in hits if h.slice.pk in by_id]
            except MemoryStoreError as exc:
                stats["search_errors"] += 1
                print(f"search_slices failed on {question.text!r}: {exc}", file=sys.stderr)
                ranked["search_slices"] = []
            results.append(
                {
                    "conversation": dialogue.sample_id,
                    "language": dialogue.language,
                    "kind": question.kind,
                    "fact": question.fact,
                    "question": question.text,
                    "evidence": sorted(question.evidence),
                    "shares_word": shares_word(
                        question.text, [dialogue.messages[p]["text"] for p in question.evidence]
                    ),
                    "rank": {name: first_hit(found, where) for name, found in ranked.items()},
                }
            )
        print(
            f"{dialogue.sample_id}: {len(placed)} messages, {len(slices)} slices, "
            f"{len(dialogue.questions)} questions",
            file=sys.stderr,
        )
    return results, dict(stats)


def recall_at(results: list[dict[str, Any]], retriever: str, k: int) -> float:
    found = sum(
        1 for r in results if r["rank"][retriever] is not None and r["rank"][retriever] <= k
    )
    return found / len(results) if results else float("nan")


# --- latency ---------------------------------------------------------------------------------


def index_core(core: Any) -> dict[str, int]:
    """THE INDEXING STEP, timed as "index s": make a core written by ``restore_unit``
    searchable the way the product does. Today: slice summaries into the full-text index
    (``memory.search.index_pending``; ``restore_unit`` already indexes its slices after
    commit, so this catches up what is left). When search gains vectors and raw-message
    indexing, call the product's own step here (its reindex / embedding of the core)."""
    from memory import search

    return {"indexed": search.index_pending()}


def build_core(
    *, tenant: Any, user: Any, agent: str, slices: int, seed: int
) -> tuple[Any, int, float]:
    """A core with ``slices`` slices of ``SLICE_MESSAGES`` messages, a unit per generated
    conversation (seeds apart from the recall set's), through ``restore_unit``."""
    from memory import services
    from memory.compressor import compress
    from memory.normalize import clean_messages
    from memory.summarizers import get_summarizer
    from memory.times import now_ms

    summarize = get_summarizer()
    core = services.append_dialogue(tenant=tenant, user=user, agent=agent, messages=[])
    made = messages = 0
    started = time.perf_counter()
    index = 0
    while made < slices:
        sample = generate(seed=seed + 1000 + index, conversations=1)
        (dialogue,) = dialogues(sample)
        index += 1
        rows = [{"role": m["role"], "text": m["text"], "at": m["at"]} for m in dialogue.messages]
        count = min(len(rows) // SLICE_MESSAGES, slices - made)
        rows = rows[: count * SLICE_MESSAGES]
        cleaned = clean_messages(rows, now=now_ms(), limit=None)
        unit_slices = []
        for s in range(count):
            chunk = cleaned[s * SLICE_MESSAGES : (s + 1) * SLICE_MESSAGES]
            unit_slices.append(
                {
                    "start_index": s * SLICE_MESSAGES,
                    "end_index": (s + 1) * SLICE_MESSAGES,
                    "summary": summarize(compress(chunk)),
                    "created_at": rows[(s + 1) * SLICE_MESSAGES - 1]["at"],
                }
            )
        services.restore_unit(
            tenant=tenant,
            core=core,
            unit={"conversation_messages": rows, "slices": unit_slices},
        )
        made += count
        messages += len(rows)
    return core, messages, time.perf_counter() - started


def settle() -> None:
    """Start each measurement from a checkpointed database with fresh statistics."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE")
            cursor.execute("CHECKPOINT")
        else:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def measure_latency(
    *, tenant: Any, user: Any, size: int, queries: list[str], seed: int, time_limit: float
) -> dict[str, Any]:
    from django.db import connection

    from memory import selectors

    agent = f"latency-{size}"
    core, messages, build_s = build_core(
        tenant=tenant, user=user, agent=agent, slices=size, seed=seed
    )
    started = time.perf_counter()
    indexed = index_core(core)
    index_s = time.perf_counter() - started
    settle()
    connection.close()

    def search(query: str) -> float:
        t0 = time.perf_counter()
        selectors.search_slices(tenant=tenant, query=query, user=user, agent=agent, limit=LIMIT)
        return (time.perf_counter() - t0) * 1000

    cold_ms = search(queries[0])
    deadline = time.monotonic() + time_limit
    for query in queries[1 : 1 + WARM_UP]:
        if time.monotonic() > deadline:
            break
        search(query)
    times: list[float] = []
    for query in queries:
        times.append(search(query))
        if time.monotonic() > deadline and len(times) >= 2:
            break  # a slow search: fewer queries, said in the table
    cuts = statistics.quantiles(times, n=100, method="inclusive")
    print(f"latency at {size} slices: p50 {cuts[49]:.1f} ms", file=sys.stderr)
    return {
        "slices": size,
        "messages": messages,
        "build_s": build_s,
        "index_s": index_s,
        "indexed": indexed,
        "cold_ms": cold_ms,
        "p50_ms": cuts[49],
        "p99_ms": cuts[98],
        "queries": len(times),
    }


# --- the run --------------------------------------------------------------------------------------


def dataset(args: argparse.Namespace) -> list[Dialogue]:
    if args.dataset:
        return dialogues(load(args.dataset))
    return dialogues(generate(seed=args.seed, conversations=args.conversations))


def worker(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    start_django(
        engine,
        args.postgres_url,
        BENCH_DB,
        FORGE_MEMORY_SUMMARIZER="memory.summarizers.extractive",
    )
    from accounts.services import create_user

    created = create_user(username="bench", tenant_name="bench", validate=False)
    tenant, user = created.tenant, created.user
    sets = dataset(args)
    results, stats = measure_recall(
        sets, tenant=tenant, user=user, idle_sessions=args.idle_sessions
    )
    rng = random.Random(args.seed)
    pool = [q.text for d in sets for q in d.questions]
    queries = [rng.choice(pool) for _ in range(args.queries)]
    latency = [
        measure_latency(
            tenant=tenant,
            user=user,
            size=size,
            queries=queries,
            seed=args.seed,
            time_limit=args.time_limit,
        )
        for size in args.sizes
    ]
    drop_database(engine, args.postgres_url)
    return {"engine": engine, "stats": stats, "questions": results, "latency": latency}


def scratch_database(url: str) -> str:
    """``--database-url``: the server's ``postgres`` database (where the scratch database
    is created and dropped), and the URL's database name as :data:`BENCH_DB`, unless it
    names none or a database never to drop."""
    global BENCH_DB
    base, _, name = url.rpartition("/")
    name = name.split("?", 1)[0]
    if name and name not in ("postgres", "template0", "template1"):
        BENCH_DB = name
    return f"{base}/postgres"


def drop_database(engine: str, postgres_url: str) -> None:
    """The scratch database goes when the run ends (10,000 slices take ~300 MB)."""
    from django.db import connection

    name = Path(str(connection.settings_dict["NAME"]))
    connection.close()
    if engine == "sqlite":
        if name.parent.name.startswith("forge-bench-"):  # the run's own (use_fresh_database)
            shutil.rmtree(name.parent, ignore_errors=True)
        return
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        # FORCE: the connection pool and the summarizer's thread may still hold sessions.
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    first = runs[0]
    stats, results = first["stats"], first["questions"]
    source = args.dataset or f"generated, seed {args.seed}"
    counts = Counter(r["language"] for r in results)
    print(
        f"Memory recall ({source}): {stats.get('conversations_en', 0)} English and "
        f"{stats.get('conversations_zh', 0)} Chinese conversations, {stats['messages']:,} "
        f"messages in {stats['slices']:,} slices ({stats['messages'] / stats['slices']:.1f} "
        f"messages each), {len(results)} questions ({counts['en']} en, {counts['zh']} zh); "
        f"rolled by append_dialogue + roll_core (threshold, keep from settings) and "
        f"{'an idle rolling after every session' if args.idle_sessions else 'a final idle rolling'}"
        ", extractive summaries; top 10 slices per question"
    )
    rows = []
    for run in runs:
        for retriever in RETRIEVERS:
            for language in (*LANGUAGES, "all"):
                chosen = [r for r in run["questions"] if language in ("all", r["language"])]
                if not chosen:
                    continue
                rows.append(
                    [run["engine"], retriever, language, str(len(chosen))]
                    + [f"{recall_at(chosen, retriever, k):.3f}" for k in KS]
                )
    print_table(["engine", "retriever", "language", "questions", *(f"R@{k}" for k in KS)], rows)
    errors = sum(run["stats"].get("search_errors", 0) for run in runs)
    if errors:
        print(f"note: search_slices raised on {errors} questions (counted as not found)")

    kinds = [k for k in KINDS if any(r["kind"] == k for r in results)]
    print()
    print("Recall@5 by question kind (both languages)")
    rows = []
    for run in runs:
        for retriever in RETRIEVERS:
            cells = []
            for kind in kinds:
                chosen = [r for r in run["questions"] if r["kind"] == kind]
                cells.append(f"{recall_at(chosen, retriever, 5):.3f}")
            rows.append([run["engine"], retriever, *cells])
    header = [f"{k} ({sum(1 for r in results if r['kind'] == k)})" for k in kinds]
    print_table(["engine", "retriever", *header], rows)

    print()
    print(
        "Recall@5 by whether the question shares a word with an evidence message "
        "(the product's tokens; CJK: a character pair)"
    )
    rows = []
    for run in runs:
        for retriever in RETRIEVERS:
            cells = []
            for language in LANGUAGES:
                for shares in (True, False):
                    chosen = [
                        r
                        for r in run["questions"]
                        if r["language"] == language and r["shares_word"] is shares
                    ]
                    cells.append(f"{recall_at(chosen, retriever, 5):.3f}" if chosen else "-")
            rows.append([run["engine"], retriever, *cells])
    header = [
        f"{language} {'shares' if shares else 'none'} ({count})"
        for language in LANGUAGES
        for shares in (True, False)
        for count in [
            sum(1 for r in results if r["language"] == language and r["shares_word"] is shares)
        ]
    ]
    print_table(["engine", "retriever", *header], rows)

    if not any(run["latency"] for run in runs):
        return  # --sizes "": recall only
    print()
    print(
        f"search_slices latency in one core (~{SLICE_MESSAGES} messages a slice, restore_unit "
        f"+ index_core): the cold first query, then up to {args.queries} warm ones "
        f"(at most {args.time_limit:g} s of them)"
    )
    rows = [
        [
            run["engine"],
            f"{row['slices']:,}",
            f"{row['messages']:,}",
            f"{row['build_s']:.1f}",
            f"{row['index_s']:.2f}",
            f"{row['cold_ms']:.1f}",
            f"{row['p50_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
            str(row["queries"]),
        ]
        for run in runs
        for row in run["latency"]
    ]
    print_table(
        [
            "engine",
            "slices",
            "messages",
            "build s",
            "index s",
            "cold ms",
            "p50 ms",
            "p99 ms",
            "queries",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="2 conversations, small cores")
    parser.add_argument("--sizes", default="100,10000", help="slices per core, for latency")
    parser.add_argument("--queries", type=int, default=200, help="warm queries per size")
    parser.add_argument(
        "--time-limit", type=float, default=120, help="seconds of warm queries per size, about"
    )
    parser.add_argument("--idle-sessions", action="store_true", help="idle rolling per session")
    parser.add_argument("--dataset", help="a file of LoCoMo's shape instead of generating")
    parser.add_argument("--dump", help="write the generated dataset (LoCoMo's shape) and exit")
    parser.add_argument("--json", help="write every question's ranks and the timings here")
    parser.add_argument("--database-url", help="a PostgreSQL server to run on instead of SQLite")
    engine_arguments(parser)
    parser.set_defaults(engines="sqlite")
    args = parser.parse_args()
    if args.quick:
        args.conversations = min(args.conversations, 2)
        args.queries = min(args.queries, 50)
        if args.sizes == parser.get_default("sizes"):
            args.sizes = "100,1000"
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s]
    if args.queries < 2:
        parser.error("--queries must be at least 2")
    if args.database_url:
        args.engines, args.postgres_url = "postgres", scratch_database(args.database_url)
    if args.dump:
        samples = generate(seed=args.seed, conversations=args.conversations)
        Path(args.dump).write_text(json.dumps(samples, ensure_ascii=False, indent=1), "utf-8")
        print(f"wrote {len(samples)} conversations to {args.dump}")
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    runs = per_engine(__file__, args.engines, sys.argv[1:])
    report(runs, args)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, ensure_ascii=False, indent=1), "utf-8")


if __name__ == "__main__":
    main()
