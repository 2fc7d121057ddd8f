"""``ucontains``: ``icontains`` whose case folding is Unicode's on SQLite too.

SQLite's ``LIKE`` folds the case of ASCII letters only, so an admin search for ``CAFÉ``
found no ``café`` (nor ``Ünïcode`` its lower case) on the default database (QA), while
PostgreSQL's ``UPPER`` folds them all. On SQLite both sides go through ``forge_fold``
(Python's ``str.casefold`` of the NFC form, registered on every new connection); on
PostgreSQL ``UPPER`` of the NFC form; elsewhere Django's ``icontains``. The admin's
searches use it (``admin_scope.BoundedSearchAdmin``).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from django.db.backends.signals import connection_created
from django.db.models import CharField, TextField
from django.db.models.lookups import IContains

FOLD = "forge_fold"


def _fold(value: Any) -> Any:
    # Composed first: "Café" typed (é) finds "Café" stored as "e" and a combining accent.
    return unicodedata.normalize("NFC", value).casefold() if isinstance(value, str) else value


class UnicodeIContains(IContains):
    lookup_name = "ucontains"

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        """Django's ``icontains`` (the backends know its operator and casts by name)."""
        return IContains(self.lhs, self.rhs).as_sql(compiler, connection)

    def as_postgresql(self, compiler: Any, connection: Any) -> Any:
        """``icontains`` (``UPPER`` folds every letter), both sides composed first."""
        lhs_sql, lhs_params = self.process_lhs(compiler, connection)
        rhs_sql, rhs_params = self.process_rhs(compiler, connection)
        return (
            f"UPPER(NORMALIZE(({lhs_sql})::text, NFC)) LIKE UPPER(NORMALIZE({rhs_sql}, NFC))",
            [*lhs_params, *rhs_params],
        )

    def as_sqlite(self, compiler: Any, connection: Any) -> Any:
        lhs_sql, lhs_params = self.process_lhs(compiler, connection)
        rhs_sql, rhs_params = self.process_rhs(compiler, connection)
        return (
            f"{FOLD}({lhs_sql}) LIKE {FOLD}({rhs_sql}) ESCAPE '\\'",
            [*lhs_params, *rhs_params],
        )


def _register_fold(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.vendor == "sqlite":
        connection.connection.create_function(FOLD, 1, _fold, deterministic=True)


def install() -> None:
    """Register the lookup and the SQLite function (the app's ``ready``)."""
    CharField.register_lookup(UnicodeIContains)
    TextField.register_lookup(UnicodeIContains)
    connection_created.connect(_register_fold, dispatch_uid="accounts.lookups.fold")
