"""The store of context snapshots (:class:`sessions.models.ContextSnapshot`): read, write
and drop, in hand-written SQL like the append path's (``sessions.sql``).

A snapshot is a cache of what a session's log derives to (``forge.context.snapshot``
encodes and checks it; this module only keeps the bytes). One row per session:

* :func:`write` is one statement, run in the transaction of the turn's last write:
  an upsert that keeps the newer of the stored row and the written one (by ``seq``),
  so a writer that lags behind never replaces a newer snapshot.
* :func:`read` is one primary-key lookup, scoped to the tenant.
* :func:`drop` deletes a session's row, or every row (``rebuild_projections``).

The row is never trusted: the reader compares its ``(seq, hash)`` with the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from .models import ContextSnapshot

TABLE = ContextSnapshot._meta.db_table


@dataclass(frozen=True)
class Stored:
    seq: int
    hash: str  # hex, as the log's wire form
    version: int
    state: bytes


def read(*, tenant_id: int, session_id: str) -> Stored | None:
    """The session's snapshot row, or None."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT seq, hash, version, state FROM {TABLE} "  # noqa: S608 (table name only)
            "WHERE session_id = %s AND tenant_id = %s",
            [session_id, tenant_id],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    seq, digest, version, state = row
    return Stored(seq=seq, hash=bytes(digest).hex(), version=version, state=bytes(state))


def read_seq(*, tenant_id: int, session_id: str) -> int:
    """The stored snapshot's ``seq`` (0: none), without reading its bytes."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT seq FROM {TABLE} WHERE session_id = %s AND tenant_id = %s",  # noqa: S608
            [session_id, tenant_id],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _key() -> str:
    """The table's key in the database: ``(session_id, tenant_id)`` on PostgreSQL
    (``forge.migrations.0008_citus_keys``), ``session_id`` on SQLite."""
    return "session_id, tenant_id" if connection.vendor == "postgresql" else "session_id"


def write(
    *, tenant_id: int, session_id: str, seq: int, hash: str, version: int, state: bytes
) -> None:
    """Store the session's snapshot as of ``seq`` (one upsert), unless a newer one is
    stored already."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (session_id, tenant_id, seq, hash, version, state) "  # noqa: S608
            "VALUES (%s, %s, %s, %s, %s, %s) "
            f"ON CONFLICT ({_key()}) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, "
            "version = excluded.version, state = excluded.state "
            f"WHERE excluded.seq >= {TABLE}.seq",
            [session_id, tenant_id, seq, bytes.fromhex(hash), version, state],
        )


def drop(*, session_id: str | None = None) -> int:
    """Delete the session's snapshot (every session's when None); how many rows went."""
    with connection.cursor() as cursor:
        if session_id is None:
            cursor.execute(f"DELETE FROM {TABLE}")  # noqa: S608 (table name only)
        else:
            cursor.execute(f"DELETE FROM {TABLE} WHERE session_id = %s", [session_id])  # noqa: S608
        return int(cursor.rowcount)
