"""Times on the wire: ISO-8601 UTC with milliseconds (CONTRACT §2), for every store."""

from __future__ import annotations

from datetime import UTC, datetime


def now_ms() -> datetime:
    """The current UTC time, truncated to milliseconds (what the wire can carry)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def format_time(value: datetime) -> str:
    """``2026-11-30T01:29:18.123Z``."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def parse_time(value: str) -> datetime:
    """An ISO-8601 time with a zone, as UTC truncated to milliseconds; ``ValueError`` else."""
    if not isinstance(value, str):
        raise ValueError(f"a time is a string, not {type(value).__name__}")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone")
    try:
        parsed = parsed.astimezone(UTC)
    except OverflowError:  # 0001-01-01 at +01:00 is before the first UTC day
        raise ValueError(f"time {value!r} is out of range") from None
    return parsed.replace(microsecond=parsed.microsecond - parsed.microsecond % 1000)
