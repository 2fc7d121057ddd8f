"""The retry policy: exponential backoff within a number of attempts and a time window."""

from __future__ import annotations

import email.utils

import pytest

from forge.providers.retry import RetryPolicy, is_retryable_status, parse_retry_after

T0 = 1_700_000_000.0


def no_jitter() -> float:
    return 0.0


def full_jitter() -> float:
    return 1.0


def test_backoff_doubles_and_is_capped():
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, rng=no_jitter)
    assert [policy.backoff(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_adds_up_to_its_fraction():
    low = RetryPolicy(jitter=0.2, rng=no_jitter)
    high = RetryPolicy(jitter=0.2, rng=full_jitter)
    assert low.backoff(2) == 1.0
    assert high.backoff(2) == pytest.approx(1.2)
    real = RetryPolicy(jitter=0.2)
    assert all(0.5 <= real.backoff(1) <= 0.6 for _ in range(100))


def test_next_attempt_at_follows_the_backoff():
    policy = RetryPolicy(max_attempts=4, window=30.0, rng=no_jitter)
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0 + 0.1) == T0 + 0.6
    assert policy.next_attempt_at(attempt=2, started_at=T0, now=T0 + 1.0) == T0 + 2.0
    assert policy.next_attempt_at(attempt=3, started_at=T0, now=T0 + 3.0) == T0 + 5.0


def test_attempts_are_bounded():
    policy = RetryPolicy(max_attempts=3, rng=no_jitter)
    assert policy.next_attempt_at(attempt=2, started_at=T0, now=T0) is not None
    assert policy.next_attempt_at(attempt=3, started_at=T0, now=T0) is None
    single = RetryPolicy(max_attempts=1)
    assert single.next_attempt_at(attempt=1, started_at=T0, now=T0) is None


def test_window_bounds_the_next_attempt():
    policy = RetryPolicy(max_attempts=10, window=5.0, rng=no_jitter)
    # 4.4 + 0.5 = 4.9 is inside the window; 4.6 + 0.5 = 5.1 is not
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0 + 4.4) == pytest.approx(T0 + 4.9)
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0 + 4.6) is None
    # exactly at the end of the window is still allowed
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0 + 4.5) == T0 + 5.0


def test_retry_after_replaces_the_backoff():
    policy = RetryPolicy(window=30.0, rng=full_jitter)
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0, retry_after=7.0) == T0 + 7.0
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0, retry_after=0.0) == T0
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0, retry_after=-3.0) == T0


def test_retry_after_beyond_the_window_gives_up():
    policy = RetryPolicy(window=30.0)
    assert policy.next_attempt_at(attempt=1, started_at=T0, now=T0 + 5, retry_after=26.0) is None


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (408, True),
        (409, False),
        (422, False),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (504, True),
        (529, True),
    ],
)
def test_retryable_statuses(status: int, retryable: bool):
    assert is_retryable_status(status) is retryable


def test_parse_retry_after_seconds():
    assert parse_retry_after({"retry-after": "3"}, now=T0) == 3.0
    assert parse_retry_after({"retry-after": " 1.5 "}, now=T0) == 1.5
    # A negative wait is no wait the header can say (RFC 9110: a non-negative
    # integer): ignored, so the policy's back-off applies. As 0 it made the attempts
    # come 50 ms apart (QA).
    assert parse_retry_after({"retry-after": "-2"}, now=T0) is None
    assert parse_retry_after({"retry-after-ms": "-500", "retry-after": "2"}, now=T0) == 2.0


def test_parse_retry_after_ms_wins():
    headers = {"retry-after-ms": "250", "retry-after": "3"}
    assert parse_retry_after(headers, now=T0) == 0.25


def test_parse_retry_after_http_date():
    date = email.utils.formatdate(T0 + 12, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=T0) == pytest.approx(12.0)
    past = email.utils.formatdate(T0 - 100, usegmt=True)
    assert parse_retry_after({"retry-after": past}, now=T0) == 0.0


@pytest.mark.parametrize("value", ["", "soon", "inf", "nan", "Mon, 99 Foo 2024"])
def test_parse_retry_after_ignores_garbage(value: str):
    assert parse_retry_after({"retry-after": value}, now=T0) is None


def test_parse_retry_after_absent():
    assert parse_retry_after({}, now=T0) is None
    assert parse_retry_after({"content-type": "application/json"}, now=T0) is None
