"""``forge.db.sqlite3``: Django's SQLite backend whose cursor remembers each statement's
``%s`` → ``?`` conversion. The conversion must be Django's, and statements must run
as they did, with and without parameters, in ``format`` and ``pyformat`` styles."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import connection
from django.db.backends.sqlite3.base import SQLiteCursorWrapper as DjangoCursor

from forge.db.sqlite3.base import _MEMO_CHARS, SQLiteCursorWrapper, _qmark

QUERIES = [
    "SELECT %s",
    "SELECT %s, %s WHERE x LIKE '%%a%%'",
    "SELECT 1",
    "UPDATE t SET a = %s WHERE b = %s AND c IN (%s, %s, %s)",
    "SELECT '%%s' || %s",
    "SELECT " + ", ".join(["%s"] * 2000),  # longer than the memo takes
]


def cursors() -> tuple[DjangoCursor, SQLiteCursorWrapper]:
    raw = sqlite3.connect(":memory:")
    return raw.cursor(factory=DjangoCursor), raw.cursor(factory=SQLiteCursorWrapper)


@pytest.mark.parametrize("query", QUERIES)
def test_the_conversion_is_djangos(query: str) -> None:
    django_cursor, cursor = cursors()
    want = django_cursor.convert_query(query)
    assert cursor.convert_query(query) == want
    assert cursor.convert_query(query) == want  # remembered
    assert _qmark(query) == want
    named = "SELECT %(a)s, %(b)s"
    assert cursor.convert_query(named, param_names=["a", "b"]) == "SELECT :a, :b"


def test_long_statements_are_not_remembered() -> None:
    _, cursor = cursors()
    _qmark.cache_clear()
    cursor.convert_query("SELECT " + ", ".join(["%s"] * _MEMO_CHARS))
    cursor.convert_query("SELECT %s")
    assert _qmark.cache_info().currsize == 1


@pytest.mark.django_db
def test_statements_run_through_it() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("this run's database is PostgreSQL")
    with connection.cursor() as cursor:
        assert isinstance(cursor.cursor, SQLiteCursorWrapper)
        for _ in range(2):  # converted, then remembered
            cursor.execute("SELECT %s, %s, '%%'", [1, "two"])
            assert cursor.fetchall() == [(1, "two", "%")]
        cursor.execute("SELECT %(a)s, %(b)s", {"a": 3, "b": 4})
        assert cursor.fetchall() == [(3, 4)]
        cursor.execute("SELECT '%s'")  # no parameters: not converted
        assert cursor.fetchall() == [("%s",)]
