"""``manage.py setup_app_role [ROLE]``: the PostgreSQL role serving processes act as.

Creates the role if it does not exist (``NOLOGIN``; it needs no password: the
connecting role switches to it with ``SET ROLE``), refuses a role that could
bypass row-level security, lets the connecting role switch to it, and grants it
the data (not the schema) of every table, now and for tables created later.
Idempotent, and safe to run twice at once (two databases of one cluster set up side
by side: roles are the cluster's, so both may create the role or grant it at the same
moment; the one that loses the race tries again). Run it after ``migrate`` as the
tables' owner.
"""

from __future__ import annotations

import re
import time
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection, transaction

ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
ATTEMPTS = 5


def _lost_a_race(exc: DatabaseError) -> bool:
    """Another session created the role, or changed a shared catalog row, meanwhile."""
    cause = exc.__cause__
    state = getattr(getattr(cause, "diag", None), "sqlstate", None)
    # 42710 duplicate_object, 23505 unique_violation (pg_authid), XX000 "tuple
    # concurrently updated" (a GRANT on the same role at the same moment).
    return state in ("42710", "23505") or "concurrently" in str(cause or exc)


class Command(BaseCommand):
    help = (
        "Create or update the PostgreSQL role that serving processes act as (row-level security)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "role", nargs="?", help="the role's name (default: FORGE_DB_APP_ROLE or forge_app)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["role"] is not None and not options["role"].strip():
            # An empty $ROLE set up the default role, which the operator did not name (QA).
            raise CommandError("ROLE must not be empty (leave it out for the default)")
        if connection.vendor != "postgresql":
            raise CommandError("row-level security needs PostgreSQL; SQLite has none")
        role = options["role"] or settings.FORGE_DB_APP_ROLE or "forge_app"
        if not ROLE.fullmatch(role):
            raise CommandError(f"not a lower-case identifier: {role!r}")
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with transaction.atomic():
                    self._set_up(role)
                break
            except DatabaseError as exc:
                if attempt == ATTEMPTS or not _lost_a_race(exc):
                    raise
                time.sleep(0.1 * attempt)
        self.stdout.write(f"role {role} is ready; serve with FORGE_DB_APP_ROLE={role}")

    def _set_up(self, role: str) -> None:
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
