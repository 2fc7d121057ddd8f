"""How many live streams (sockets and SSE streams together) one user may hold open:
``FORGE_MAX_STREAMS_PER_USER``, in each server process and, with ``REDIS_URL`` set,
across all of them (``forge.realtime.shared_limits``: slots in Redis that expire when
their process stops renewing them; Redis away, the per-process count alone holds).

Each open stream holds a hub subscription and a task; a client that opens them
in a loop must not exhaust a process. The per-process count needs no shared state
and cannot leak across a crash. A slot is taken only once a stream's subscription is
open, and given back when the subscription closes (``forge.realtime.hub``), so a failed
open keeps none.
"""

from __future__ import annotations

import threading
from collections import Counter

from django.conf import settings

from forge.errors import ForgeError

from . import shared_limits


class TooManyStreams(ForgeError):
    code = "too_many_streams"
    status = 429


_lock = threading.Lock()  # SSE streams are released from a worker thread
_open: Counter[int] = Counter()


def check(user_id: int) -> None:
    """Raise ``TooManyStreams`` if the user may open no more streams now (a refusal that
    costs nothing; :func:`take` is what counts)."""
    limit = settings.FORGE_MAX_STREAMS_PER_USER
    with _lock:
        if _open[user_id] >= limit:
            raise TooManyStreams(f"at most {limit} open streams per user; close one first")


def take(user_id: int) -> None:
    """Count one more stream of the user, or raise ``TooManyStreams``. Only an open
    subscription takes one (``forge.realtime.hub.join``), and its close gives it back."""
    limit = settings.FORGE_MAX_STREAMS_PER_USER
    with _lock:
        if _open[user_id] >= limit:
            raise TooManyStreams(f"at most {limit} open streams per user; close one first")
        _open[user_id] += 1
    if not shared_limits.take(user_id, limit):
        give_back(user_id, shared=False)
        raise TooManyStreams(f"at most {limit} open streams per user; close one first")


def give_back(user_id: int, *, shared: bool = True) -> None:
    if shared:
        shared_limits.give_back(user_id)
    with _lock:
        _open[user_id] -= 1
        if _open[user_id] <= 0:
            del _open[user_id]


def open_streams(user_id: int) -> int:
    return _open[user_id]
