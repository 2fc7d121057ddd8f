"""Which tenants the code running now may see: the input of PostgreSQL's row-level
security, one context variable for every store.

Every tenant-owned table (sessions, events, messages, parts, memory's tables)
has a policy that shows a row only when its ``tenant_id`` is among the tenants
of the PostgreSQL setting ``forge.tenants`` (``*``: all). The application's
database connections run as a role without ``BYPASSRLS`` that does not own the
tables (``forge.db.postgresql``), and send this context's value as that setting
before their queries. Nothing set means nothing visible.

The faces set it when they resolve the caller's tenant (``forge.access``), a
turn for its session's tenant, the janitor and start-up recovery for all. It is
a context variable, so it follows a request or a task into the threads that do
its database work, and never leaks from one request to another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

ALL = "*"

_visible: ContextVar[str] = ContextVar("forge_visible_tenants", default="")


def visible() -> str:
    """The ``forge.tenants`` value for now: ``""`` (none), ``"*"``, or ``"3,7"``."""
    return _visible.get()


def _value(tenants: Iterable[int] | str) -> str:
    if tenants == ALL:
        return ALL
    if isinstance(tenants, str):
        raise ValueError(f"tenants are ids or {ALL!r}, not {tenants!r}")
    return ",".join(str(int(t)) for t in tenants)


def activate(tenants: Iterable[int] | str) -> None:
    """From now on, in this context, see these tenants (ids, or ``ALL``)."""
    _visible.set(_value(tenants))


@contextlib.contextmanager
def scope(tenants: Iterable[int] | str) -> Iterator[None]:
    """See these tenants inside the block only."""
    token = _visible.set(_value(tenants))
    try:
        yield
    finally:
        _visible.reset(token)


@contextlib.contextmanager
def scope_value(value: str) -> Iterator[None]:
    """See again, inside the block only, what :func:`visible` returned earlier (for work
    that runs later on behalf of the same caller, such as a streamed response's body)."""
    token = _visible.set(value)
    try:
        yield
    finally:
        _visible.reset(token)
