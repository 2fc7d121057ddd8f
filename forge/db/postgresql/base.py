"""PostgreSQL with row-level security: Django's backend, plus the application role.

When a serving process has switched it on (:func:`forge.db.serve_as_app`, from
``forge.asgi`` / ``forge.wsgi``, if ``FORGE_DB_APP_ROLE`` is set), every new
connection does ``SET ROLE <FORGE_DB_APP_ROLE>`` (a role that owns no table and
has no ``BYPASSRLS``), and before each query sends the tenants the running code
may see (``accounts.tenancy``) as ``forge.tenants``, when they changed since the
connection last sent them. A rolled-back transaction or savepoint may have
undone the setting, so the connection forgets what it sent then.

Management commands (migrations, ``roll_dialogs``, ``rebuild_projections`` …)
never switch it on: they run as the connecting role, the tables' owner, which
row-level security does not restrict.

Its features differ from Django's in one point: ``allows_group_by_selected_pks`` is
off. Django's PostgreSQL backend groups an aggregate query by a model's primary key
alone, counting on PostgreSQL to know that the key determines the row's other
columns. PostgreSQL knows it only from a ``PRIMARY KEY`` constraint on exactly those
columns, and the tenant-owned tables' keys are ``(id, tenant_id)`` in the database
while Django's key is ``id`` (``forge.migrations.0008_citus_keys``): such a query
would fail with "column … must appear in the GROUP BY clause" (the admin's lists did).
With it off, Django groups by every selected column, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.backends.postgresql import base, features

from accounts import tenancy

_app_role_on = False


def serve_as_app() -> None:
    global _app_role_on
    _app_role_on = bool(settings.FORGE_DB_APP_ROLE)


class DatabaseFeatures(features.DatabaseFeatures):
    # See the module's docstring: the database's primary keys are not Django's.
    allows_group_by_selected_pks = False


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app_role: str = ""
        self._sent_tenants: str | None = None
        self.execute_wrappers.append(self._with_tenants)

    def init_connection_state(self) -> None:
        super().init_connection_state()
        self._sent_tenants = None
        self.app_role = settings.FORGE_DB_APP_ROLE if _app_role_on else ""
        if self.app_role:
            with self.connection.cursor() as cursor:
                cursor.execute(f'SET ROLE "{self.app_role}"')

    def use_app_role(self, role: str) -> None:
        """Switch this open connection to ``role`` (tests; ``""``: back to the owner)."""
        self.ensure_connection()
        with self.connection.cursor() as cursor:
            cursor.execute(f'SET ROLE "{role}"' if role else "RESET ROLE")
        self.app_role = role
        self._sent_tenants = None

    def _with_tenants(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if self.app_role:
            wanted = tenancy.visible()
            if wanted != self._sent_tenants:
                context["cursor"].cursor.execute(
                    "SELECT set_config('forge.tenants', %s, false)", [wanted]
                )
                self._sent_tenants = wanted
        return execute(sql, params, many, context)

    def _rollback(self) -> None:
        self._sent_tenants = None
        super()._rollback()  # type: ignore[misc]  # Django's, untyped in the stubs

    def _savepoint_rollback(self, sid: str) -> None:
        # Forget only after: in a failed transaction the wrapper's ``set_config``
        # would run before ``ROLLBACK TO SAVEPOINT`` and be refused.
        try:
            super()._savepoint_rollback(sid)  # type: ignore[misc]
        finally:
            self._sent_tenants = None
