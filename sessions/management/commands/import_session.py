from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.exceptions import ForgeError
from sessions import services


class Command(BaseCommand):
    help = (
        "Import an export file into USER's tenant, after verifying its header and hash "
        "chain. The session keeps its ids when they are all free (else, and with --copy, "
        "the session, messages and parts get new ids and a new chain that records the "
        "source's id and head hash). Nothing is written when the file is refused."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", metavar="FILE")
        parser.add_argument("--user", required=True, metavar="NAME", help="the new owner")
        parser.add_argument("--copy", action="store_true", help="new ids and a new chain")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        path = Path(options["file"])
        try:
            with path.open("rb") as lines:
                events = services.parse_log(lines)
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        except ForgeError as exc:
            raise CommandError(f"{exc.code}: {exc}") from None
        try:
            session = services.import_log(user=user, events=events, copy=options["copy"])
        except ForgeError as exc:
            raise CommandError(f"{exc.code}: {exc}") from None
        self.stdout.write(session.pk)
