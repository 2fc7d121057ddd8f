from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Tenant
from forge.usage.days import parse_day
from forge.usage.services import rebuild_usage


class Command(BaseCommand):
    help = (
        "Recompute the usage table from the session logs: the rows of every day (or of "
        "the days from --since on) are replaced by the fold of every log. Idempotent."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--since", metavar="YYYY-MM-DD", help="only days from this one on")
        parser.add_argument("--tenant", metavar="NAME", help="only this tenant")

    def handle(self, *args: Any, **options: Any) -> None:
        since = None
        if options["since"] is not None:  # (an empty one meant all days, silently)
            try:
                since = parse_day(options["since"])
            except ValueError:
                raise CommandError(
                    f"--since: expected a day YYYY-MM-DD, got {options['since']!r}"
                ) from None
        tenant = None
        if options["tenant"] is not None:  # (an empty name meant every tenant, silently)
            tenant = Tenant.objects.filter(name=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant named {options['tenant']!r}")
        try:
            counted = rebuild_usage(since=since, tenant=tenant)
        except KeyboardInterrupt:
            raise CommandError(
                "interrupted; each tenant's usage is rebuilt in a transaction of its own, "
                "so none is half-done: run it again",
                returncode=130,  # as a shell reports Ctrl-C, and as reindex_memory does
            ) from None
        scope = f"tenant {tenant.name}" if tenant else "every tenant"
        days = f"from {since}" if since else "all days"
        self.stdout.write(f"usage rebuilt for {scope}, {days}: {counted} replies counted")
