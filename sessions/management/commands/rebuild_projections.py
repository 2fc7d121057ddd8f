from __future__ import annotations

import sys
from argparse import ArgumentParser
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q, QuerySet
from tqdm import tqdm

from sessions import selectors, services
from sessions.models import Session
from sessions.projector import compare

BATCH = 200


def _batches(sessions: QuerySet[Session]) -> Iterator[Session]:
    """The sessions, read ``BATCH`` at a time, each batch a query read whole (keyset on
    ``(created_at, id)``). A cursor left open across the rebuild's writes (Django's
    ``iterator()``) held a read snapshot on SQLite: once another connection committed,
    each session's ``BEGIN IMMEDIATE`` failed at once with "database is locked" (a stale
    snapshot cannot be upgraded to a write, and the busy timeout does not wait for it)."""
    after: tuple[Any, str] | None = None
    while True:
        page = sessions
        if after is not None:
            page = page.filter(Q(created_at__gt=after[0]) | Q(created_at=after[0], id__gt=after[1]))
        batch = list(page[:BATCH])
        yield from batch
        if len(batch) < BATCH:
            return
        after = (batch[-1].created_at, batch[-1].pk)


class Command(BaseCommand):
    help = (
        "Rebuild messages and parts from the event log. With --check, change nothing: "
        "report every difference between the tables and the log (and any break in the "
        "log's hash chain) and exit 1 if there is one."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--session", metavar="ID", help="only this session")
        parser.add_argument(
            "--check", action="store_true", help="compare only; exit 1 on a difference"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        sessions = Session.objects.select_related("tenant").order_by("created_at", "id")
        if options["session"] is not None:  # "" names no session: not "every one" (QA)
            sessions = sessions.filter(pk=options["session"])
            if not sessions.exists():
                raise CommandError(f"no session {options['session']!r}")
        total = sessions.count()
        progress = tqdm(
            _batches(sessions),
            total=total,
            unit="session",
            disable=not sys.stderr.isatty() or total < 2,
        )
        # Counted here, not read from the bar: a bar that is off (stderr no terminal, as
        # under cron or a pipe) counts nothing, and an interrupted run said "after 0".
        self.done = 0
        try:
            if options["check"]:
                self._check(progress, total)
            else:
                self._rebuild(progress, total)
        except KeyboardInterrupt:
            if options["check"]:  # a check writes nothing (it said "rebuilt"; QA)
                raise CommandError(
                    f"interrupted after checking {self.done} of {total} session(s); "
                    "nothing was changed",
                    returncode=130,
                ) from None
            raise CommandError(
                f"interrupted after {self.done} of {total} session(s); each session is "
                "rebuilt in a transaction of its own, so none is half-done: run it again",
                returncode=130,  # as a shell reports Ctrl-C, and as reindex_memory does
            ) from None

    def _check(self, sessions: Any, total: int) -> None:
        differing = 0
        for session in sessions:
            problems = [
                f"log seq {p.seq}: {p.message}"
                for p in selectors.verify_log(tenant=session.tenant, session=session)
            ]
            problems += compare(
                selectors.projection_from_log(tenant=session.tenant, session=session),
                selectors.stored_projection(tenant=session.tenant, session=session),
            )
            if problems:
                differing += 1
                for problem in problems:
                    self.stdout.write(f"{session.pk}: {problem}")
            self.done += 1
        if differing:
            raise CommandError(f"{differing} of {total} session(s) differ from their log")
        self.stdout.write(f"{total} session(s) checked: projections match the log")

    def _rebuild(self, sessions: Any, total: int) -> None:
        messages = parts = 0
        for session in sessions:
            state = services.rebuild_projection(session=session)
            messages += len(state.messages)
            parts += len(state.parts)
            self.done += 1
        self.stdout.write(f"rebuilt {total} session(s): {messages} message(s), {parts} part(s)")
