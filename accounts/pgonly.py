"""A migration operation that runs its SQL on PostgreSQL only.

For schema work that exists only there: the keys a Citus-ready schema needs
(``forge.db.citus``), which SQLite neither needs nor could change without
remaking a table (and losing its triggers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import migrations


def _run(statements: Sequence[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement, params=None)

    return run


def postgresql_only(forward: Sequence[str], backward: Sequence[str]) -> migrations.RunPython:
    """``RunPython`` that executes ``forward`` (``backward`` when reversed), in order,
    on PostgreSQL, and nothing on any other database."""
    return migrations.RunPython(_run(list(forward)), _run(list(backward)), elidable=False)
