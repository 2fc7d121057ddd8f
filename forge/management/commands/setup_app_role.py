"""``manage.py setup_app_role [ROLE]``: the PostgreSQL role serving processes act as.

Creates the role if it does not exist (``NOLOGIN``; it needs no password: the
connecting role switches to it with ``SET ROLE``), refuses a role that could
bypass row-level security, lets the connecting role switch to it, and grants it
the data (not the schema) of every table, now and for tables created later.
Idempotent; run it after ``migrate`` as the tables' owner.
"""

from __future__ import annotations

import re
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class Command(BaseCommand):
    help = (
        "Create or update the PostgreSQL role that serving processes act as (row-level security)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "role", nargs="?", help="the role's name (default: FORGE_DB_APP_ROLE or forge_app)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("row-level security needs PostgreSQL; SQLite has none")
        role = options["role"] or settings.FORGE_DB_APP_ROLE or "forge_app"
        if not ROLE.fullmatch(role):
            raise CommandError(f"not a lower-case identifier: {role!r}")
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [role])
            found = cursor.fetchone()
            if found is None:
                cursor.execute(f'CREATE ROLE "{role}" NOLOGIN NOSUPERUSER NOBYPASSRLS')
            elif found[0] or found[1]:
                raise CommandError(f"role {role} is a superuser or may bypass row-level security")
            cursor.execute(f'GRANT "{role}" TO CURRENT_USER')
            cursor.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
            cursor.execute(
                f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"'
            )
            cursor.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
            cursor.execute(
                "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
                f'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "{role}"'
            )
            cursor.execute(
                "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
                f'GRANT USAGE, SELECT ON SEQUENCES TO "{role}"'
            )
        self.stdout.write(f"role {role} is ready; serve with FORGE_DB_APP_ROLE={role}")
