from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Tenant
from forge.runtime.approvals import pending
from sessions.log import format_time, now_ms
from sessions.models import Session


class Command(BaseCommand):
    help = (
        "List the tool calls waiting for a person's approval, oldest first: session, "
        "call id, tool, when it expires (or that it has), and its input. Answer one "
        "through the API (POST /api/sessions/<id>/approvals/<call_id>/), the socket, "
        "the chat page or the admin; an overdue one is denied by the next janitor sweep."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--session", metavar="ID", help="only this session")
        parser.add_argument("--tenant", metavar="NAME", help="only this tenant's sessions")
        parser.add_argument("--json", action="store_true", help="one JSON object per line")

    def handle(self, *args: Any, **options: Any) -> None:
        sessions = Session.objects.select_related("tenant").order_by("pk")
        if options["tenant"] is not None:
            tenant = Tenant.objects.filter(name=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}")
            sessions = sessions.filter(tenant=tenant)
        if options["session"] is not None:
            sessions = sessions.filter(pk=options["session"])
            if not sessions.exists():
                raise CommandError(f"no session {options['session']!r}")
        calls = pending.pending_in(sessions)
        now = format_time(now_ms())
        for session, call in calls:
            expires = call["expires_at"]
            row = {"session_id": session.pk, "tenant": session.tenant.name, **call}
            if options["json"]:
                self.stdout.write(json.dumps(row, ensure_ascii=False, sort_keys=True))
                continue
            when = f"expired at {expires}" if pending.is_past(expires, now) else expires
            shown = json.dumps(call["input"], ensure_ascii=False, sort_keys=True)
            self.stdout.write(
                f"{session.pk}  {call['call_id']}  {call['tool']}  "
                f"{when or 'no expiry'}  {shown[:200]}"
            )
        if not options["json"]:
            self.stdout.write(f"{len(calls)} call(s) waiting for approval")
