"""Reads that tolerate lag go to the streaming replica; everything else to the primary.

With ``DATABASE_REPLICA_URL`` unset there is no ``replica`` database and nothing here
changes anything: every function answers the primary and :class:`ReplicaRouter` is
not installed.

The rule (docs/deploy.md, "Reads on the replica"):

* Nothing goes to the replica unless a call site asks, by running the read through
  :func:`lagging_read` (or :func:`replica_alias` for an explicit ``using=``). The call
  sites that ask are the reads a client cannot tell from a moment ago: history pages,
  exports, the admin's lists, memory search, the context route with ``?at=``.
* Reads that must be current never ask: prompts, leases, the stream's resume after a
  cursor, the janitor, and anything inside a transaction on the primary (a read in a
  write sees the write: :func:`replica_alias` answers the primary inside ``atomic``).
* A read that names a log position (``at_least=(tenant, session_id, seq)``) goes to
  the primary when the replica has not replayed that session's log up to ``seq``, so
  a client is never shown less than it was already told exists.
* A read of one session's log as it is now (a history page, an export:
  :func:`session_read`, :func:`session_iter`) names the primary's head, its seq and
  hash: the replica serves it only when its newest event of the session is that one,
  so a client reads its own writes, a session that exists is never a 404 or an empty
  export because the replica has not replayed it yet, and a session deleted and
  imported again with its ids (``import_session``), shorter or different, is never
  served as the replica still has it.
* A replica that fails a read (down, restarting, refusing connections) is left out for
  ``FORGE_REPLICA_RETRY_SECONDS`` and the read runs again on the primary.

How a read is sent: :func:`lagging_read` sets, for the duration of one call, the alias
:class:`ReplicaRouter` answers for reads (a context variable, so a thread or task
never sees another's). Writes always go to the primary. A lazily evaluated queryset
must be evaluated inside the call (or be given ``using=`` explicitly): outside it the
router answers the primary again.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

log = logging.getLogger(__name__)

PRIMARY = DEFAULT_DB_ALIAS
REPLICA = "replica"

T = TypeVar("T")

_reads_on: ContextVar[str] = ContextVar("forge_reads_on", default=PRIMARY)
# monotonic time until which the replica is left out (it failed a read); per process.
_replica_down_until = 0.0


def replica_configured() -> bool:
    return REPLICA in connections.settings


def _in_write() -> bool:
    return connections[PRIMARY].in_atomic_block


def replica_alias() -> str:
    """The alias a lag-tolerant read should use now: the replica when one is configured,
    it has not failed recently, and the caller is not inside a transaction on the
    primary; else the primary."""
    if not replica_configured() or _in_write():
        return PRIMARY
    if time.monotonic() < _replica_down_until:
        return PRIMARY
    return REPLICA


def mark_replica_down(exc: BaseException) -> None:
    """Leave the replica out for ``FORGE_REPLICA_RETRY_SECONDS`` after it failed."""
    global _replica_down_until
    _replica_down_until = time.monotonic() + settings.FORGE_REPLICA_RETRY_SECONDS
    log.warning("replica read failed, reading from the primary: %s", exc)
    with contextlib.suppress(Exception):
        connections[REPLICA].close()


def mark_replica_up() -> None:
    """Forget a failure (tests; an operator who brought the replica back)."""
    global _replica_down_until
    _replica_down_until = 0.0


# A log position a read needs: (tenant, session id, seq), and the hash of the event
# at that seq when the read is of the log as it is now (its head on the primary).
Position = tuple[Any, str, int] | tuple[Any, str, int, Any]


def head_on(alias: str, *, tenant: Any, session_id: str) -> tuple[int, Any]:
    """``(seq, hash)`` of the session's newest event on ``alias`` (``(0, None)``: none)."""
    from sessions.models import SessionEvent

    newest = (
        SessionEvent.objects.using(alias)
        .filter(tenant=tenant, session_id=session_id)
        .order_by("-seq")
        .values_list("seq", "hash")
        .first()
    )
    return (newest[0], newest[1]) if newest else (0, None)


def replica_serves(position: Position) -> bool:
    """Whether the replica has what a read at ``position`` needs: the session's log up
    to its seq; with a hash, exactly that head (not a longer log that the primary no
    longer has: a session deleted and imported again with its ids)."""
    tenant, session_id, seq, *hashed = position
    replica = head_on(REPLICA, tenant=tenant, session_id=session_id)
    if hashed:
        return replica == (seq, hashed[0])
    return replica[0] >= seq


@contextlib.contextmanager
def reads_on(alias: str) -> Iterator[None]:
    """Send the reads the router routes to ``alias`` inside the block."""
    token = _reads_on.set(alias)
    try:
        yield
    finally:
        _reads_on.reset(token)


def lagging_read(fn: Callable[[], T], *, at_least: Position | None = None) -> T:
    """``fn()`` with its reads on the replica when :func:`replica_alias` allows it.

    ``at_least=(tenant, session_id, seq)``: the read needs the session's log replayed up
    to ``seq``; a replica behind that is not used (with a fourth element, the hash of
    the primary's head: only a replica whose head is that event). A database error on the replica
    leaves it out for a while and runs ``fn()`` again on the primary (so ``fn`` must
    only read).
    """
    alias = replica_alias()
    if alias == REPLICA:
        try:
            if at_least is not None and not replica_serves(at_least):
                alias = PRIMARY
            if alias == REPLICA:
                with reads_on(REPLICA):
                    return fn()
        except DatabaseError as exc:
            if not _failed_on_replica(exc):
                raise
            mark_replica_down(exc)
    with reads_on(PRIMARY):
        return fn()


def _failed_on_replica(exc: DatabaseError) -> bool:
    """Whether ``exc`` came from the replica's connection being unusable (not from the
    query itself, which would fail the same on the primary)."""
    from django.db import InterfaceError, OperationalError

    if isinstance(exc, InterfaceError | OperationalError):
        return True
    replica = connections[REPLICA]
    return replica.connection is None or not replica.is_usable()


def lagging_iter(
    factory: Callable[[str], Iterator[T]], *, at_least: Position | None = None
) -> Iterator[T]:
    """Items of ``factory(alias)``, an iterator whose queries take ``using=alias``, on the
    replica when it may serve them. The first item is read before this returns, so a
    replica that is away falls back to the primary; one that fails mid-stream ends the
    stream with the error (the client sees a cut export, never a wrong one)."""

    def start() -> tuple[list[T], Iterator[T]]:
        iterator = factory(_reads_on.get())
        return list(itertools.islice(iterator, 1)), iterator

    head, rest = lagging_read(start, at_least=at_least)
    return itertools.chain(head, rest)


def _primary_head(tenant: Any, session_id: str) -> Position | None:
    """``at_least`` for a read of the session's whole log: its head on the primary, seq
    and hash; None when no replica could serve."""
    if replica_alias() != REPLICA:
        return None
    seq, head_hash = head_on(PRIMARY, tenant=tenant, session_id=session_id)
    return tenant, session_id, seq, head_hash


def session_read(fn: Callable[[], T], *, tenant: Any, session_id: str) -> T:
    """``fn()``, a read of the session's log as it is now, on the replica only when it
    has replayed the log up to the primary's head (see the module's rule)."""
    return lagging_read(fn, at_least=_primary_head(tenant, session_id))


def session_iter(
    factory: Callable[[str], Iterator[T]], *, tenant: Any, session_id: str
) -> Iterator[T]:
    """:func:`lagging_iter` for a read of the session's whole log (an export)."""
    return lagging_iter(factory, at_least=_primary_head(tenant, session_id))


class ReplicaRouter:
    """Reads on the alias :func:`lagging_read` set (the primary by default), writes and
    migrations on the primary. Installed when ``DATABASE_REPLICA_URL`` is set."""

    def db_for_read(self, model: type, **hints: Any) -> str:
        alias = _reads_on.get()
        if alias != PRIMARY and _in_write():
            return PRIMARY
        return alias

    def db_for_write(self, model: type, **hints: Any) -> str:
        return PRIMARY

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # one database and its copy

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == PRIMARY
