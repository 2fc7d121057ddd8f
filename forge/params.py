"""Numbers in query strings and headers (``after``, ``limit``, ``at``, ``Last-Event-ID``),
parsed one way for every face: ASCII digits only, bounded, or ``InvalidCursor`` (400;
a route whose numbers are no cursor passes its own 400 as ``error``: the memory API's
``offset``/``limit`` are ``InvalidQuery``); and yes/no flags (``wait``), or
``InvalidFlag`` (400)."""

from __future__ import annotations

from accounts.exceptions import ForgeError
from sessions.exceptions import InvalidCursor

MAX_DIGITS = 18  # a seq or a count fits a signed 64-bit integer


def parse_seq(
    raw: str | None,
    *,
    name: str,
    default: int,
    error: type[ForgeError] = InvalidCursor,
) -> int:
    """A non-negative integer, or ``default`` when ``raw`` is missing or empty; else
    ``error`` (a 400), its message naming ``name``.

    Nothing but ASCII digits: no sign, no white space (``int()`` strips it, so
    ``?after=%205`` read as 5 though the contract says digits only)."""
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise error(f"{name} must be a non-negative integer, got {raw[:40]!r}")
    digits = raw.lstrip("0") or "0"  # (int() refuses over 4,300 digits, zeros included)
    if len(digits) > MAX_DIGITS:  # (it said "must be a non-negative integer": QA)
        raise error(f"{name} must be at most {MAX_DIGITS} digits long, got {raw[:40]!r}")
    return int(digits)


def parse_limit(
    raw: str | None,
    *,
    name: str = "limit",
    default: int,
    maximum: int,
    error: type[ForgeError] = InvalidCursor,
) -> int:
    """An integer from 1 to ``maximum``, or ``default`` when missing; else ``error``,
    naming that range whatever was wrong (QA: ``-1`` was told "a non-negative integer",
    and then ``0`` "from 1 to …")."""
    refused = error(f"{name} must be an integer from 1 to {maximum}, got {(raw or '')[:40]!r}")
    try:
        value = parse_seq(raw, name=name, default=default, error=error)
    except error:
        raise refused from None
    if not 1 <= value <= maximum:
        raise refused
    return value


class InvalidFlag(ForgeError, ValueError):
    code = "invalid"


_YES, _NO = ("1", "true", "yes"), ("0", "false", "no")


def parse_flag(raw: str | None, *, name: str, default: bool = False) -> bool:
    """``1`` / ``true`` / ``yes`` or ``0`` / ``false`` / ``no`` (any case), ``default``
    when missing or empty; anything else is ``InvalidFlag``: ``?wait=2`` meant "do not
    wait" without a word, which a client that misspelt it never learnt."""
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _YES:
        return True
    if value in _NO:
        return False
    raise InvalidFlag(f"{name} must be 1, true, yes, 0, false or no, got {raw[:40]!r}")
