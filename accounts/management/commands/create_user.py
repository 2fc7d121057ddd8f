from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from accounts.services import create_user


class Command(BaseCommand):
    help = (
        "Create a user in a tenant (the tenant is created if needed). "
        "With --token, the user's API token is printed alone on the last line."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--tenant", required=True, help="tenant name; created if missing")
        parser.add_argument("--password", help="login password (no password: token-only user)")
        parser.add_argument("--token", action="store_true", help="create and print an API token")
        parser.add_argument("--staff", action="store_true", help="may log in to the admin site")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["password"] is not None and not options["password"]:
            # --password '' made a user who could not sign in, without a word
            raise CommandError("--password must not be empty (leave it out for a token-only user)")
        try:
            created = create_user(
                username=options["username"],
                tenant_name=options["tenant"],
                password=options["password"],
                staff=options["staff"],
                with_token=options["token"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        tenant_note = "new tenant" if created.tenant_created else "existing tenant"
        self.stdout.write(
            f"created user {created.user.username!r} in {tenant_note} {created.tenant.name!r}"
            + (" (staff)" if created.user.is_staff else "")
        )
        if created.token:
            self.stdout.write(created.token)
