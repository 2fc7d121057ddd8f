"""Numbers in query strings and headers (``after``, ``limit``, ``at``, ``Last-Event-ID``),
parsed one way for every face: ASCII digits only, bounded, or ``InvalidCursor`` (400)."""

from __future__ import annotations

from sessions.exceptions import InvalidCursor

MAX_DIGITS = 18  # a seq or a count fits a signed 64-bit integer


def parse_seq(raw: str | None, *, name: str, default: int) -> int:
    """A non-negative integer, or ``default`` when ``raw`` is missing or empty."""
    if raw is None or raw.strip() == "":
        return default
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_DIGITS:
        raise InvalidCursor(f"{name} must be a non-negative integer, got {raw[:40]!r}")
    return int(raw)


def parse_limit(raw: str | None, *, name: str = "limit", default: int, maximum: int) -> int:
    """An integer from 1 to ``maximum``, or ``default`` when missing."""
    value = parse_seq(raw, name=name, default=default)
    if not 1 <= value <= maximum:
        raise InvalidCursor(f"{name} must be from 1 to {maximum}")
    return value
