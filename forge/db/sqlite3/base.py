"""SQLite: Django's backend, with the placeholder conversion of a statement remembered.

Django's SQLite cursor turns every ``%s`` statement into a ``?`` one with a regular
expression, on every ``execute``. A turn runs the same few dozen statements each time
(``sessions.sql``, the ORM's compiled queries), so the conversion is remembered per
statement text: ~3 µs of each execute, a tenth of the Python a plain statement costs
through Django's cursor. Everything else is Django's backend as configured in
``forge.settings.backends.database_config`` (WAL, ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.db.backends.sqlite3 import base

# Statements longer than this (a batch of many rows, whose text varies with the count)
# are converted each time, so the memo holds only the repeated short ones.
_MEMO_CHARS = 4096


@lru_cache(maxsize=1024)
def _qmark(query: str) -> str:
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


class SQLiteCursorWrapper(base.SQLiteCursorWrapper):
    def convert_query(self, query: str, *, param_names: Any = None) -> str:
        if param_names is None and len(query) <= _MEMO_CHARS:
            return _qmark(query)
        return super().convert_query(query, param_names=param_names)


class DatabaseWrapper(base.DatabaseWrapper):
    def create_cursor(self, name: Any = None) -> Any:
        return self.connection.cursor(factory=SQLiteCursorWrapper)
