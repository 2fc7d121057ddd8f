"""The tables memory search reads and writes, and ``column IN (…)`` for either engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from ..models import MemoryCore, MemoryMessage, MemorySlice, MemoryUnit

# SQL below is assembled from table names (the models' Meta) and fixed fragments;
# every value is a bound parameter, and tokens are letters and digits only.

FTS_TABLE = "memory_search_fts"
SLICE = MemorySlice._meta.db_table
UNIT = MemoryUnit._meta.db_table
CORE = MemoryCore._meta.db_table
MESSAGE = MemoryMessage._meta.db_table


def _in(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """``column IN (…)`` for either engine, with its parameters."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)", [list(values)]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)
