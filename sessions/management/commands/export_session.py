from __future__ import annotations

import os
import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from sessions import selectors
from sessions.models import Session


class Command(BaseCommand):
    help = (
        "Write a session's log as an export file (JSON Lines: a header, then every event "
        "with its hash), to FILE or to standard output. import_session reads it back. A "
        "log whose sequence or hash chain does not verify is written as it is, and the "
        "command then fails naming the first problem."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("session_id", metavar="ID")
        parser.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")

    def handle(self, *args: Any, **options: Any) -> None:
        session = Session.objects.select_related("tenant").filter(pk=options["session_id"]).first()
        if session is None:
            raise CommandError(f"no session {options['session_id']!r}")
        lines = selectors.export_lines(session=session)
        if options["output"]:
            path = Path(options["output"])
            try:
                with path.open("w", encoding="utf-8") as out:
                    out.writelines(lines)
            except OSError as exc:
                raise CommandError(f"cannot write {path}: {exc}") from None
            self.stderr.write(f"exported {session.pk} to {path}")
        else:
            try:
                for line in lines:
                    self.stdout.write(line, ending="")
                self.stdout.flush()
            except BrokenPipeError:
                # The reader stopped early (``| head``): not the export's error. Python
                # would report the pipe again when it flushes stdout at exit.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return
        problems = selectors.verify_log(tenant=session.tenant, session=session)
        if problems:
            first = problems[0]
            raise CommandError(
                f"the log of {session.pk} does not verify at seq {first.seq}: {first.message} "
                f"({len(problems)} problem(s)); it was exported as it is, and import_session "
                "will refuse the file"
            )
