"""When to retry a failed model call: a small policy any provider can use.

A call is made at most ``max_attempts`` times, and no attempt is scheduled later
than ``window`` seconds after the first one started. Between attempts the wait
grows exponentially (``base_delay``, twice that, four times …, capped at
``max_delay``) with a little random jitter on top, unless the server said how
long to wait (``Retry-After``), which is then honoured exactly. When honouring it
would leave the window, the policy gives up instead of retrying early.

The policy only computes times; the caller sleeps (so tests can inject a clock
and an instant sleep) and decides what is retryable (see
:func:`is_retryable_status`).
"""

from __future__ import annotations

import email.utils
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["RetryPolicy", "is_retryable_status", "parse_retry_after"]


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth another attempt: 408, 429 and any 5xx."""
    return status in (408, 429) or status >= 500


def parse_retry_after(headers: Mapping[str, str], *, now: float) -> float | None:
    """Seconds to wait according to the response headers, or None when they do not say.

    Reads ``retry-after-ms`` (milliseconds, as OpenAI sends), then ``retry-after``
    as seconds or as an HTTP date (relative to ``now``, a UNIX time; one in the past
    is 0). Negative, unparseable or non-finite numbers are ignored: a negative wait
    taken as 0 made the attempts come 50 ms apart (QA).
    """
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw.strip()) / divisor
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff bounded by a number of attempts and a time window."""

    max_attempts: int = 4
    window: float = 30.0  # seconds after the first attempt started
    base_delay: float = 0.5  # wait before the 2nd attempt (then doubled each time)
    max_delay: float = 8.0
    jitter: float = 0.2  # up to this fraction is added to each computed wait
    rng: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def backoff(self, attempt: int) -> float:
        """The wait after attempt number ``attempt`` (1-based) failed, jitter included."""
        delay = min(self.max_delay, self.base_delay * 2 ** max(0, attempt - 1))
        return delay * (1.0 + self.jitter * self.rng())

    def next_attempt_at(
        self,
        *,
        attempt: int,
        started_at: float,
        now: float,
        retry_after: float | None = None,
    ) -> float | None:
        """When to make attempt ``attempt + 1`` after attempt ``attempt`` failed.

        ``started_at`` is when the first attempt started and ``now`` the current
        time (both UNIX times); ``retry_after`` is the server's requested wait in
        seconds, if any. Returns the UNIX time of the next attempt, or None to give
        up (attempts exhausted, or the next attempt would fall outside the window).
        """
        if attempt >= self.max_attempts:
            return None
        delay = retry_after if retry_after is not None else self.backoff(attempt)
        at = now + max(0.0, delay)
        if at > started_at + self.window:
            return None
        return at
