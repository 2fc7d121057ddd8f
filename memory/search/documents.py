"""A slice's full-text document (:func:`document`: its token lines) and the slices read
to be indexed (:func:`load_docs`, :func:`doc_of`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

from .. import text
from ..results import RollingResult
from ..vectors import Doc
from .tables import MESSAGE, SLICE, UNIT, _in

# SQL below is assembled from table names (the models' Meta) and fixed fragments;
# every value is a bound parameter, and tokens are letters and digits only.


INDEX_BATCH = 500
DISTINCT_MAX = 50_000  # distinct tokens of one PostgreSQL document (a tsvector is < 1 MB)


@dataclass(frozen=True)
class Document:
    """A slice's full-text document: token lines (summary, then each message)."""

    body: str
    length: int
    lexemes: list[str]


def document(doc: Doc) -> Document:
    lines = [text.tokens(doc.summary), *(text.tokens(m) for m in doc.messages)]
    seen: dict[str, None] = {}
    for line in lines:
        seen.update(dict.fromkeys(line))
    return Document(
        body="\n".join(" ".join(line) for line in lines),
        length=sum(len(line) for line in lines),
        lexemes=list(seen)[:DISTINCT_MAX],
    )


def doc_of(result: RollingResult) -> Doc:
    return Doc(
        slice_id=result.slice_id,
        tenant_id=result.tenant_id,
        core_id=result.core_id,
        start_index=int(result.slice["start_index"]),
        summary=str(result.slice["summary"]),
        messages=tuple(str(m.get("text", "")) for m in result.messages),
    )


def load_docs(
    slice_ids: Sequence[str] | None = None,
    *,
    pending: bool = False,
    core_id: str | None = None,
    after: tuple[str, str] | None = None,
    limit: int = INDEX_BATCH,
) -> list[Doc]:
    """Slices with their messages' texts, oldest first: those named, or (``pending``) those
    not indexed yet, or (neither) all, of ``core_id`` when given, after ``after``
    (``(created_at, id)`` of the last one of a previous batch)."""
    where: list[str] = []
    params: list[Any] = []
    if slice_ids is not None:
        if not slice_ids:
            return []
        clause, values = _in("s.id", slice_ids)
        where.append(clause)
        params += values
    if pending:
        where.append("NOT s.indexed")
    if core_id is not None:
        where.append("u.core_id = %s")
        params.append(core_id)
    if after is not None:
        where.append("(s.created_at > %s OR (s.created_at = %s AND s.id > %s))")
        params += [after[0], after[0], after[1]]
    condition = " AND ".join(where) or "1 = 1"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.id, s.tenant_id, u.core_id, s.start_index, s.end_index, s.summary "
            f"FROM {SLICE} s JOIN {UNIT} u ON u.id = s.unit_id WHERE {condition} "
            "ORDER BY s.created_at, s.id LIMIT %s",
            [*params, limit],
        )
        rows = cursor.fetchall()
        if not rows:
            return []
        clause, values = _in("s.id", [row[0] for row in rows])
        cursor.execute(
            f'SELECT s.id, m."index", m.text FROM {SLICE} s JOIN {MESSAGE} m '
            f'ON m.unit_id = s.unit_id AND m."index" >= s.start_index AND m."index" < s.end_index '
            f"WHERE {clause}",
            values,
        )
        texts: dict[str, dict[int, str]] = defaultdict(dict)
        for slice_id, index, body in cursor.fetchall():
            texts[slice_id][int(index)] = body
    return [
        Doc(
            slice_id=slice_id,
            tenant_id=int(tenant_id),
            core_id=core_id_,
            start_index=int(start),
            summary=summary,
            messages=tuple(texts[slice_id].get(i, "") for i in range(int(start), int(end))),
        )
        for slice_id, tenant_id, core_id_, start, end, summary in rows
    ]


def slice_created(slice_id: str) -> tuple[str, str] | None:
    """``(created_at, id)`` of a slice as :func:`load_docs` pages by, in SQL form."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT created_at, id FROM {SLICE} WHERE id = %s", [slice_id])
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])
