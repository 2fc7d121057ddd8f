from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from argparse import ArgumentParser
from collections.abc import Iterable
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
                _write(path, lines)
            except OSError as exc:
                raise CommandError(f"cannot write {path}: {exc}") from None
            finally:
                # Its cursor, before the connection goes (no "Exception ignored" noise).
                close = getattr(lines, "close", None)
                if close is not None:
                    close()
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


def _write(path: Path, lines: Iterable[str]) -> None:
    """Write ``lines`` to ``path`` whole or not at all: into a file beside it, renamed into
    place once complete (QA: a full disk left a truncated export at the target, over
    the earlier one). What is no plain file is written in place: ``/dev/stdout``,
    ``/proc/self/fd/N`` (the shell's redirection, which a rename would miss), a device,
    a pipe. A link is followed: the file it points to is replaced, the link kept. The
    new file keeps the replaced one's mode (an operator's 0600 export stays 0600), or
    gets a plain ``open``'s (0666 less the umask)."""
    if str(path).startswith(("/dev/", "/proc/")):
        _write_in_place(path, lines)
        return
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        _write_in_place(path, lines)
        return
    if target.exists():
        mode = stat.S_IMODE(target.stat().st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, part = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(lines)
        os.chmod(part, mode)
        os.replace(part, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise


def _write_in_place(path: Path, lines: Iterable[str]) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.writelines(lines)
