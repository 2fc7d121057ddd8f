from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from forge.runtime import recover_sessions
from forge.runtime.recovery import held_open
from sessions.models import Session


class Command(BaseCommand):
    help = (
        "Finalize turns that a crashed process left open: open text is kept, pending and "
        "running tools end in error (interrupted), the reply gets a MessageAbortedError. "
        "Sessions whose runner is alive (a live lease) are left alone."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--session", metavar="ID", help="only this session")
        parser.add_argument("--quiet", action="store_true", help="print nothing when idle")

    def handle(self, *args: Any, **options: Any) -> None:
        if (
            options["session"] is not None
            and not Session.objects.filter(pk=options["session"]).exists()
        ):
            raise CommandError(f"no session {options['session']!r}")
        recovered = recover_sessions(session_id=options["session"])
        for session_id, message_ids in recovered.items():
            self.stdout.write(f"{session_id}: finalized {', '.join(message_ids)}")
        held = held_open(session_id=options["session"])
        if recovered or held or not options["quiet"]:
            self.stdout.write(f"recovered {len(recovered)} session(s)")
        if held:
            # Right after a crash the dead process's lease is still live, and this said
            # only "recovered 0" (QA): say what is waited for, and until when.
            last = max(lease.expires_at for lease in held)
            self.stdout.write(
                f"{len(held)} session(s) with an open reply left alone: a live lease holds "
                f"them ({', '.join(lease.session_id for lease in held[:5])}"
                f"{', …' if len(held) > 5 else ''}). If their process died, run this again "
                f"after {last.isoformat(timespec='seconds')}, when the last of them expires."
            )
