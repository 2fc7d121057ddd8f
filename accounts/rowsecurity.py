"""Migration operations that put a tenant-owned table under row-level security
(PostgreSQL; nothing on SQLite, where the selectors' tenant checks stand alone)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def _enable(tables: list[str]) -> Any:
    def forwards(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for table in tables:
            schema_editor.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
            schema_editor.execute(f"DROP POLICY IF EXISTS forge_tenant ON {table}")
            schema_editor.execute(
                f"CREATE POLICY forge_tenant ON {table} "
                "USING (forge_visible(tenant_id)) WITH CHECK (forge_visible(tenant_id))"
            )

    return forwards


def _disable(tables: list[str]) -> Any:
    def backwards(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for table in tables:
            schema_editor.execute(f"DROP POLICY IF EXISTS forge_tenant ON {table}")
            schema_editor.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")

    return backwards


def tenant_owned(*tables: str) -> migrations.RunPython:
    """``RunPython`` that enables row-level security with the tenant policy on ``tables``."""
    return migrations.RunPython(_enable(list(tables)), _disable(list(tables)), elidable=False)
