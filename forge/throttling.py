"""Rate limits, one per kind, the same for every face; and a throttle that fails open.

* ``UserRateThrottle``: every API request of a user (``FORGE_API_RATE``);
* ``PromptRateThrottle``: prompts (``FORGE_PROMPT_RATE``), counted alike whether
  they arrive over HTTP or the socket (:meth:`PromptRateThrottle.allow_user`).

The faces that are not DRF views count against the first too: opening a stream (SSE,
the socket) is one request of its user (:func:`check_api_rate`).

Throttle history lives in the cache (Redis when ``REDIS_URL`` is set). When the
cache cannot be reached, a throttle lets the request through and logs a warning
(at most once a minute): a rate limit is a guard, and reads must not fail
because the guard's memory is away. After a failure every throttle of the process
lets requests through without asking the cache for ``PAUSE_AFTER_FAILURE``
seconds: an unresponsive Redis costs one request its timeout (the cache's
socket timeout, ``forge.settings.base.caches``), not every request of an outage
one per throttle.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from rest_framework import throttling

from accounts.exceptions import ForgeError

logger = logging.getLogger(__name__)

_WARN_EVERY = 60.0
PAUSE_AFTER_FAILURE = 10.0
_last_warning = 0.0
_paused_until = 0.0


def _cache_unreachable(exc: Exception) -> None:
    global _last_warning, _paused_until
    now = time.monotonic()
    _paused_until = now + PAUSE_AFTER_FAILURE
    if now - _last_warning >= _WARN_EVERY:
        _last_warning = now
        logger.warning("throttle cache unreachable, not limiting for now: %s", type(exc).__name__)


def ask_the_cache_again() -> None:
    """End a pause after a failure now (a test whose Redis came back)."""
    global _paused_until
    _paused_until = 0.0


class _FailOpen:
    def allow_request(self, request: Any, view: Any) -> bool:
        if time.monotonic() < _paused_until:
            return True  # the cache failed a moment ago: do not wait for it again yet
        try:
            return bool(super().allow_request(request, view))  # type: ignore[misc]
        except Exception as exc:
            _cache_unreachable(exc)
            return True


class UserRateThrottle(_FailOpen, throttling.UserRateThrottle):
    pass


class _Caller:
    """What a throttle reads of a request: the user."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.META: dict[str, str] = {}


class PromptRateThrottle(_FailOpen, throttling.SimpleRateThrottle):
    """Prompts per user, whichever face they arrive by (cache key ``throttle_prompts_<pk>``)."""

    scope = "prompts"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}

    def allow_user(self, user: Any) -> bool:
        """For faces that are not DRF views (the socket)."""
        return self.allow_request(_Caller(user), None)


class Throttled(ForgeError):
    """Over a rate limit, outside DRF's views (which raise DRF's own ``Throttled``)."""

    code = "throttled"
    status = 429

    def __init__(self, wait: float | None) -> None:
        self.retry_after = None if wait is None else max(1, math.ceil(wait))
        later = "" if self.retry_after is None else f"; try again in {self.retry_after} s"
        super().__init__(f"too many requests{later}")


def check_api_rate(user: Any) -> None:
    """Count one API request of ``user`` (``FORGE_API_RATE``) for a face that is no DRF
    view: opening a stream (SSE, the socket). Raises :class:`Throttled` (429, with
    ``Retry-After``) when over the limit; fails open as every throttle does."""
    throttle = UserRateThrottle()
    if not throttle.allow_request(_Caller(user), None):
        raise Throttled(throttle.wait())
