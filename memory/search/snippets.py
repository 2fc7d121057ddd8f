"""Snippets: about ``size`` characters of a text around its first match of the query's
words."""

from __future__ import annotations

from collections.abc import Iterable

from .. import text

SNIPPET_CHARS = 200


def snippet(body: str, words: Iterable[str], *, size: int = SNIPPET_CHARS) -> str:
    """About ``size`` characters of ``body`` around its first match of ``words`` (its
    start when none matches), white space collapsed, cuts marked with ``…``."""
    place = text.locate(body, frozenset(words))
    if place is None:
        start = 0
    else:
        middle = (place[0] + place[1]) // 2
        start = max(0, min(middle - size // 2, len(body) - size))
    end = min(len(body), start + size)
    piece = " ".join(body[start:end].split())
    return ("…" if start > 0 else "") + piece + ("…" if end < len(body) else "")
