"""``manage.py reindex_memory``: re-embed memory slices and messages (CONTRACT §5).

    reindex_memory [--core ID] [--batch N] [--fulltext] [--json]

Embeds every slice (its summary and messages) that has no vectors of the current
embedder's model: never embedded (the embedder was down, or vectors were off),
or embedded by another model (after a change of ``FORGE_EMBEDDING_MODEL`` /
``FORGE_MEMORY_EMBEDDER``; the old vectors go in the same transaction as the new
ones arrive). ``--fulltext`` also rebuilds every slice's full-text entry (after a
change of the tokenizer). Batches of ``--batch`` slices, each committed on its
own: a run that stops (Ctrl-C, a failing embedder) keeps what it did, and the
next run goes on from there; a run with nothing to do changes nothing. With vectors
off (``FORGE_MEMORY_VECTORS``) nothing is embedded and no embedder is built.

Exit status: 0 done; 1 the embedder failed (the count done so far is printed; run
again later); 130 interrupted (Ctrl-C: what is left is printed); 2 bad input (an
unknown core, a batch out of range, no embedder configured).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Exists, OuterRef, QuerySet
from tqdm import tqdm

from memory import search, vectors
from memory.embeddings import Embedder, EmbeddingError, get_embedder
from memory.models import MemoryCore, MemorySlice, MemoryVectors

BATCH_DEFAULT = 64
BATCH_MAX = 10_000


class Command(BaseCommand):
    help = (
        "Embed memory slices and messages that have no vectors of the current embedding "
        "model (and, with --fulltext, rebuild their full-text index)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--core", metavar="ID", help="only this memory core")
        parser.add_argument(
            "--batch",
            type=int,
            default=BATCH_DEFAULT,
            help=f"slices per batch, each committed on its own (default {BATCH_DEFAULT})",
        )
        parser.add_argument(
            "--fulltext", action="store_true", help="also rebuild the full-text index"
        )
        parser.add_argument("--json", action="store_true", help="print a JSON report")

    def handle(self, *args: Any, **options: Any) -> None:
        batch = options["batch"]
        if not 1 <= batch <= BATCH_MAX:
            raise CommandError(f"--batch must be from 1 to {BATCH_MAX}, got {batch}", returncode=2)
        core_id = options["core"]
        if core_id is not None and not MemoryCore.objects.filter(pk=core_id).exists():
            raise CommandError(f"no memory core {core_id!r}", returncode=2)
        if not search.vectors_enabled():
            self._without_vectors(core_id, batch, options)
            return
        try:
            embedder = get_embedder()
        except Exception as exc:
            raise CommandError(
                f"no embedder: {type(exc).__name__}: {exc} (see FORGE_MEMORY_EMBEDDER, "
                "FORGE_EMBEDDING_MODEL)",
                returncode=2,
            ) from None
        show = sys.stderr.isatty() and options["verbosity"] > 0 and not options["json"]
        started = time.monotonic()
        rebuilt: dict[str, int] = {}
        if options["fulltext"]:  # first: it needs no embedder (QA: one unreachable stopped it)
            try:
                rebuilt["fulltext"] = self._fulltext(core_id, batch, show)
            except KeyboardInterrupt:
                raise CommandError(
                    "interrupted while rebuilding the full text; run reindex_memory "
                    "--fulltext again",
                    returncode=130,
                ) from None
        try:
            model = embedder.name  # an OpenAI-compatible one without a set dimension asks
        except EmbeddingError as exc:
            problem = {"code": exc.code, "message": str(exc)}
            if options["json"]:
                refused = {
                    "model": None, "core": core_id, "embedded": 0, "error": problem, **rebuilt
                }  # fmt: skip
                self.stdout.write(json.dumps(refused, sort_keys=True))
            done = f" (full text rebuilt for {rebuilt['fulltext']})" if rebuilt else ""
            raise CommandError(
                f"the embedder could not be reached ({problem['code']}: {problem['message']});"
                f" nothing was embedded{done}: run reindex_memory again later",
                returncode=1,
            ) from None
        report: dict[str, Any] = {"model": model, "core": core_id, **rebuilt}
        try:
            report["embedded"], failure = self._embed(core_id, batch, embedder, show)
        except KeyboardInterrupt:  # Ctrl-C: each batch committed is kept; say what is left
            left = missing(core_id, embedder).count()
            raise CommandError(
                f"interrupted; {left} slices still need vectors: run reindex_memory again "
                "to go on from there",
                returncode=130,
            ) from None
        report["removed"] = stale(core_id, embedder).delete()[0] if failure is None else 0
        report["left"] = missing(core_id, embedder).count()
        report["elapsed"] = round(time.monotonic() - started, 3)
        report["error"] = failure
        self._print(report, options)
        if failure is not None:
            raise CommandError(
                f"the embedder failed after {report['embedded']} slices ({failure['code']}: "
                f"{failure['message']}); {report['left']} slices still need vectors: run "
                "reindex_memory again later",
                returncode=1,
            )

    def _without_vectors(self, core_id: str | None, batch: int, options: dict[str, Any]) -> None:
        """Vectors off (``FORGE_MEMORY_VECTORS``: full text only, nothing embedded): the
        embedder is not built (QA: with none reachable, ``--fulltext`` rebuilt nothing and
        exited 2; with the offline one, every slice was embedded for nothing)."""
        self.stderr.write(
            "vectors are off (FORGE_MEMORY_VECTORS): nothing is embedded; run with "
            "FORGE_MEMORY_VECTORS=1 to embed before turning them on"
        )
        show = sys.stderr.isatty() and options["verbosity"] > 0 and not options["json"]
        started = time.monotonic()
        report: dict[str, Any] = {"model": None, "core": core_id}
        if options["fulltext"]:
            report["fulltext"] = self._fulltext(core_id, batch, show)
        report.update(embedded=0, removed=0, left=None, error=None)
        report["elapsed"] = round(time.monotonic() - started, 3)
        self._print(report, options)

    def _fulltext(self, core_id: str | None, batch: int, show: bool) -> int:
        slices = MemorySlice.objects.all()
        if core_id is not None:
            slices = slices.filter(unit__core_id=core_id)
        done = 0
        after: tuple[str, str] | None = None
        with tqdm(
            total=slices.count(), unit="slice", desc="full text", file=sys.stderr, disable=not show
        ) as bar:
            while True:
                docs = search.load_docs(core_id=core_id, after=after, limit=batch)
                if not docs:
                    return done
                done += search.index_fulltext(docs, rebuild=True)
                bar.update(len(docs))
                # Page on from the newest of the batch still there. One deleted meanwhile
                # has no position: its predecessor's serves (stopping there left every
                # slice after it unrebuilt, reported done; QA). None of them left: the
                # same position, whose next page no longer holds them.
                for doc in reversed(docs):
                    position = search.slice_created(doc.slice_id)
                    if position is not None:
                        after = position
                        break

    def _embed(
        self, core_id: str | None, batch: int, embedder: Embedder, show: bool
    ) -> tuple[int, dict[str, str] | None]:
        todo = missing(core_id, embedder)
        done = 0
        with tqdm(
            total=todo.count(), unit="slice", desc="vectors", file=sys.stderr, disable=not show
        ) as bar:
            while True:
                ids = list(todo.order_by("created_at", "id").values_list("pk", flat=True)[:batch])
                if not ids:
                    return done, None
                docs = search.load_docs(ids, limit=batch)
                try:
                    vectors.store(docs, embedder, replace=True)
                except EmbeddingError as exc:
                    return done, {"code": exc.code, "message": str(exc)}
                done += len(docs)
                bar.update(len(docs))

    def _print(self, report: dict[str, Any], options: dict[str, Any]) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(report, sort_keys=True))
            return
        if options["verbosity"] == 0:
            return
        scope = f"core {report['core']}" if report["core"] else "every core"
        rebuilt = f", full text rebuilt for {report['fulltext']}" if "fulltext" in report else ""
        if report["model"] is None:  # vectors off
            self.stdout.write(f"{scope}: no vectors (off){rebuilt}, in {report['elapsed']:.2f} s")
            return
        self.stdout.write(
            f"{scope}: {report['embedded']} slices embedded with {report['model']}{rebuilt}, "
            f"{report['left']} left, in {report['elapsed']:.2f} s"
        )


def missing(core_id: str | None, embedder: Embedder) -> QuerySet[MemorySlice]:
    """Slices with no vectors of the embedder's model (of the core, when given)."""
    current = MemoryVectors.objects.filter(slice=OuterRef("pk"), model=embedder.name)
    slices = MemorySlice.objects.filter(~Exists(current))
    if core_id is not None:
        slices = slices.filter(unit__core_id=core_id)
    return slices


def stale(core_id: str | None, embedder: Embedder) -> QuerySet[MemoryVectors]:
    """Vectors of other models of slices that have the current model's (never compared:
    left over when a slice was embedded again outside this command)."""
    current = MemoryVectors.objects.filter(slice=OuterRef("slice"), model=embedder.name)
    rows = MemoryVectors.objects.exclude(model=embedder.name).filter(Exists(current))
    if core_id is not None:
        rows = rows.filter(core_id=core_id)
    return rows
