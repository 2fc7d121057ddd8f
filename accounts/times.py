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
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone")
    parsed = parsed.astimezone(UTC)
    return parsed.replace(microsecond=parsed.microsecond - parsed.microsecond % 1000)
