"""The searched memory (:class:`Scope`) in SQL: its tenant and core tokens in the FTS5
table, the conditions that narrow the slice table to it, and the token lines of its
slices (:func:`candidates`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import connection

from ..models import MemoryUnit
from .fusion import Candidate
from .tables import FTS_TABLE, SLICE, UNIT, _in

# SQL below is assembled from table names (the models' Meta) and fixed fragments;
# every value is a bound parameter, and tokens are letters and digits only.


SCOPE_CORES_MAX = 64  # cores named one by one in an FTS5 query; more: the tenant's postings


def core_token(core_id: str) -> str:
    return "c" + re.sub(r"[^0-9a-z]", "", core_id.lower())


def tenant_token(tenant_id: int) -> str:
    return f"t{int(tenant_id)}"


@dataclass(frozen=True)
class Scope:
    """The searched memory: the tenant's slices, of ``core_ids`` unless ``whole_tenant``."""

    tenant_id: int
    core_ids: tuple[str, ...]  # most recently active first
    whole_tenant: bool = False
    unit_ids: tuple[str, ...] | None = None  # the cores' units (read by :func:`with_units`)


def with_units(scope: Scope) -> Scope:
    """The scope with its cores' units: slices are narrowed by ``unit_id`` directly (a
    join to the units made PostgreSQL compare every slice's unit with each one)."""
    if scope.whole_tenant or scope.unit_ids is not None:
        return scope
    units = MemoryUnit.objects.filter(tenant_id=scope.tenant_id, core_id__in=scope.core_ids)
    return replace(scope, unit_ids=tuple(units.values_list("id", flat=True)))


def _fts_scope(scope: Scope) -> str:
    if scope.whole_tenant or len(scope.core_ids) > SCOPE_CORES_MAX:
        return f'scope : "{tenant_token(scope.tenant_id)}"'
    return "scope : (" + " OR ".join(f'"{core_token(c)}"' for c in scope.core_ids) + ")"


def _slice_scope(scope: Scope) -> tuple[str, list[Any]]:
    """SQL narrowing ``s`` (the slice table) to the scope, with its parameters."""
    if scope.whole_tenant:
        return "s.tenant_id = %s", [scope.tenant_id]
    units = with_units(scope).unit_ids
    if not units:
        return "1 = 0", []
    clause, values = _in("s.unit_id", units)
    return f"s.tenant_id = %s AND {clause}", [scope.tenant_id, *values]


def _candidates(cursor: Any, where: str, params: list[Any]) -> list[tuple[Any, Candidate]]:
    """(key, candidate) of slices ``s`` matching ``where``, with their token lines; the key
    is the full-text row (SQLite's rowid, PostgreSQL's slice id)."""
    if connection.vendor == "postgresql":
        cursor.execute(
            f"SELECT s.id, s.id, u.core_id, s.start_index, coalesce(s.search_text, ''), "
            f"coalesce(s.search_length, 0) "
            f"FROM {SLICE} s JOIN {UNIT} u ON u.id = s.unit_id WHERE {where}",
            params,
        )
    else:
        cursor.execute(
            f"SELECT s.search_rowid, s.id, u.core_id, s.start_index, coalesce(f.body, ''), "
            f"coalesce(s.search_length, 0) "
            f"FROM {SLICE} s JOIN {UNIT} u ON u.id = s.unit_id "
            f"LEFT JOIN {FTS_TABLE} f ON f.rowid = s.search_rowid WHERE {where}",
            params,
        )
    return [
        (
            key,
            Candidate(slice_id=sid, core_id=core, start_index=int(start), body=body, length=int(n)),
        )
        for key, sid, core, start, body, n in cursor.fetchall()
    ]


def _member_scope(scope: Scope) -> tuple[str, list[Any]]:
    """SQL keeping the slices ``s`` of the scope, for a lookup by slice id (a subquery on
    the cores' units: no list of every unit). ``+s.tenant_id``: a condition no index
    serves, so SQLite with no statistics looks the slices up by id rather than walking
    every slice of the tenant by its tenant index (~10 ms at 10,000 slices)."""
    if scope.whole_tenant:
        return "+s.tenant_id = %s", [scope.tenant_id]
    if not scope.core_ids:
        return "1 = 0", []
    clause, values = _in("mu.core_id", scope.core_ids)
    return (
        f"+s.tenant_id = %s AND s.unit_id IN (SELECT mu.id FROM {UNIT} mu "
        f"WHERE +mu.tenant_id = %s AND {clause})",
        [scope.tenant_id, scope.tenant_id, *values],
    )


def candidates(scope: Scope, slice_ids: Sequence[str]) -> dict[str, Candidate]:
    """The scope's slices among ``slice_ids``, with their token lines."""
    if not slice_ids:
        return {}
    clause, values = _in("s.id", slice_ids)
    where, params = _member_scope(scope)
    with connection.cursor() as cursor:
        rows = _candidates(cursor, f"{clause} AND {where}", values + params)
    return {c.slice_id: c for _, c in rows}
