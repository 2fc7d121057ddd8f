from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from forge.context import request_for
from forge.errors import ForgeError
from sessions.models import Session


class Command(BaseCommand):
    help = (
        "Print the request the model was sent as of event SEQ (a step-start's seq gives "
        "that step's request), derived from the log alone: the events up to SEQ, folded, "
        "with the summary boundaries in force then."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("session_id", metavar="ID")
        parser.add_argument("--at", required=True, type=int, metavar="SEQ")
        parser.add_argument("--json", action="store_true", help="the request as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        session = Session.objects.select_related("tenant").filter(pk=options["session_id"]).first()
        if session is None:
            raise CommandError(f"no session {options['session_id']!r}")
        try:
            model, request = request_for(session, at=options["at"])
        except ForgeError as exc:
            raise CommandError(f"{exc.code}: {exc}") from None
        if options["json"]:
            body = {"at": options["at"], "provider_model": model, **request.as_dict()}
            self.stdout.write(json.dumps(body, ensure_ascii=False, indent=2))
            return
        self.stdout.write(f"# {model} as of seq {options['at']}")
        for text in request.system:
            self.stdout.write(f"\n[system]\n{text}")
        for message in request.messages:
            self.stdout.write(f"\n[{message['role']}]\n{message.get('content') or ''}")
            for call in message.get("tool_calls", []):
                function = call["function"]
                self.stdout.write(f"  -> {function['name']}({function['arguments']})")
        if request.tools:
            self.stdout.write(f"\n[tools] {', '.join(tool.name for tool in request.tools)}")
