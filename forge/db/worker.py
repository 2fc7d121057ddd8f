"""Running synchronous units of database work from the runtime's event loop.

All of the runtime's database work runs on one dedicated thread: one
connection per process, writes of a turn in order, and a connection that can
be closed deliberately (:func:`close_connections`) — at shutdown, and by tests
before the test database is dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forge-db")
# Read-only units that may wait on something besides the database (:func:`aside`).
_aside = ThreadPoolExecutor(max_workers=2, thread_name_prefix="forge-db-aside")


def db(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``function`` as an awaitable that runs on the runtime's database thread, after
    :func:`_drop_broken`."""

    def unit(*args: Any, **kwargs: Any) -> Any:
        _drop_broken()
        return function(*args, **kwargs)

    return sync_to_async(unit, thread_sensitive=False, executor=_executor)


def aside(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``function`` as an awaitable that runs on one of a few threads of their own, not
    the runtime's database thread: read-only work that may wait on something besides
    the database. ``memory_search`` asks the embedding server for the query's vector;
    on the runtime's one thread a slow server held up every turn's writes and the
    leases' renewals, and turns lost their leases (QA, HIGH). Each unit gives its
    connections back when it ends (these threads keep none between units)."""

    def unit(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        finally:
            for conn in connections.all(initialized_only=True):
                if not conn.in_atomic_block:
                    conn.close()

    return sync_to_async(unit, thread_sensitive=False, executor=_aside)


def _drop_broken() -> None:
    """Close this thread's connections that an error left unusable, so that the next
    query opens (or checks out) a new one.

    The runtime's thread keeps its connection for the process's life. Django drops a
    broken connection only when a request starts or ends (``close_old_connections``),
    which this thread has none of: after the server closed it (a restart, a failover,
    ``pg_terminate_backend``), every unit of work of the process failed until daphne
    was restarted (QA, HIGH). The unit that meets the closed connection still fails;
    the next one works. Nothing is asked of the server unless an error other than a
    data or integrity error occurred since the last commit or rollback (Django's
    ``errors_occurred``, as its own check): the normal path costs a flag read."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or not conn.errors_occurred or conn.in_atomic_block:
            continue
        if conn.is_usable():
            conn.errors_occurred = False
        else:
            conn.close()


def release_connections() -> None:
    """Give the calling thread's pooled database connections back to the pool before it
    waits on the runtime, whose database work runs on the thread of :func:`db` and
    needs a connection of the same pool.

    A synchronous view holds its thread's connection until the request ends; one that
    waited on the runtime while holding it (``?wait=1`` for a whole reply) could leave
    the runtime's thread none: on a fresh process, a burst of prompts as large as the
    pool held every connection, and each waited for a turn that waited for a connection
    (30 s, then "couldn't get a connection"; QA). What the view reads next checks one
    out again. A connection in a transaction is kept; SQLite has no pool."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block and _pooled(conn):
            conn.close()


def _pooled(conn: Any) -> bool:
    return conn.vendor == "postgresql" and bool(conn.settings_dict.get("OPTIONS", {}).get("pool"))


def close_connections() -> None:
    """Close the runtime thread's database connections (waits for work in progress)."""
    _executor.submit(connections.close_all).result()
