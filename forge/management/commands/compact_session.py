from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from forge import runtime
from forge.errors import ForgeError
from sessions.models import Session


class Command(BaseCommand):
    help = (
        "Compact a session now: FORGE_SMALL_MODEL summarizes its older history behind a "
        "boundary, the most recent turns stay verbatim. Nothing is written when the "
        "session is empty, busy, has nothing new since its last compaction, or the "
        "summary fails (exit status 1)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("session_id", metavar="ID")

    def handle(self, *args: Any, **options: Any) -> None:
        session = Session.objects.select_related("tenant").filter(pk=options["session_id"]).first()
        if session is None:
            raise CommandError(f"no session {options['session_id']!r}")
        try:
            marker = runtime.compact(session=session, wait=True) or {}
        except ForgeError as exc:
            raise CommandError(f"{exc.code}: {exc}") from None
        tail = marker.get("tail_start_id") or "none"
        self.stdout.write(
            f"compacted {session.pk}: summary {marker.get('message_id')}, kept tail from {tail}"
        )
