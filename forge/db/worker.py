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


def db(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``function`` as an awaitable that runs on the runtime's database thread."""
    return sync_to_async(function, thread_sensitive=False, executor=_executor)


def close_connections() -> None:
    """Close the runtime thread's database connections (waits for work in progress)."""
    _executor.submit(connections.close_all).result()
