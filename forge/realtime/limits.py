"""How many live streams (sockets and SSE streams together) one user may hold open in
one server process: ``FORGE_MAX_STREAMS_PER_USER``.

Each open stream holds a hub subscription and a task; a client that opens them
in a loop must not exhaust a process. The count is per process (a load
balancer spreads a user's streams over processes, so the whole deployment
allows processes times the limit); it needs no shared state and cannot leak across
a crash.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse

from forge.errors import ForgeError


class TooManyStreams(ForgeError):
    code = "too_many_streams"
    status = 429


_lock = threading.Lock()  # SSE streams are released from a worker thread
_open: Counter[int] = Counter()


def take(user_id: int) -> None:
    """Count one more stream of the user, or raise ``TooManyStreams``."""
    limit = settings.FORGE_MAX_STREAMS_PER_USER
    with _lock:
        if _open[user_id] >= limit:
            raise TooManyStreams(f"at most {limit} open streams per user; close one first")
        _open[user_id] += 1


def give_back(user_id: int) -> None:
    with _lock:
        _open[user_id] -= 1
        if _open[user_id] <= 0:
            del _open[user_id]


def open_streams(user_id: int) -> int:
    return _open[user_id]


class CountedStreamResponse(StreamingHttpResponse):
    """A streaming response that holds one of ``user_id``'s streams (taken with
    :func:`take` before it was made) and gives it back when Django closes the response,
    also when the client went away before the first frame."""

    def __init__(self, *args: Any, user_id: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holder: int | None = user_id

    def close(self) -> None:
        holder, self._holder = self._holder, None
        try:
            if holder is not None:
                give_back(holder)
        finally:
            super().close()
