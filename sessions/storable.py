"""What the log can store, on every engine (``services.append`` refuses the rest, and
names where it is): no NUL character, no lone UTF-16 surrogate, and only floats that
PostgreSQL's ``jsonb`` gives back as they were written. Each check walks any depth
that JSON could encode, iteratively, and says where it found what it looks for as a
path (``part.state.input.content``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

NUL = "\x00"


def _holds_nul(text: str) -> bool:
    return NUL in text


def holds_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone UTF-16 surrogate (U+D800-U+DFFF; a str holds one
    only alone: JSON decodes an escaped pair to one character). No UTF-8 text can hold
    it, so neither can the log (its hash, its rows, its frames are UTF-8). O(1) for
    ASCII text (``isascii``); else a UTF-8 encoding, the one thing it fails on."""
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _path_where(
    value: Any, path: str, holds: Callable[[Any], bool], kind: type = str
) -> str | None:
    """Where a ``kind`` (a string, a key included; or a float) of ``value`` ``holds``,
    as a path from ``path``; None when none does. Iterative: any depth that JSON could
    encode is walked."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, kind):
            if holds(item):
                return where
        elif isinstance(item, Mapping):
            children = []
            for key, child in item.items():
                if isinstance(key, kind) and holds(key):
                    return f"{where}[{key!r}]"  # repr: shows the character as an escape
                children.append((child, f"{where}.{key}"))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(c, f"{where}[{i}]") for i, c in enumerate(item)]))
    return None


def nul_path(value: Any, path: str) -> str | None:
    """Where ``value`` holds a NUL character (U+0000) in a string, a key included, as a
    path from ``path`` (``part.state.input.content``, ``data.blocks[0].text``); None
    when it holds none. Iterative: any depth that JSON could encode is walked.

    The log refuses NUL in every string (``services.append``): PostgreSQL can store
    it neither in ``jsonb`` nor in ``text``, and a log must read the same on both
    stacks, so SQLite refuses it too."""
    return _path_where(value, path, _holds_nul)


def surrogate_path(value: Any, path: str) -> str | None:
    """Where ``value`` holds a lone surrogate (:func:`holds_surrogate`) in a string, a
    key included, as :func:`nul_path` says where a NUL is. JSON's ``"\\ud800"`` decodes
    to one, so any JSON a client or a tool sends may hold one; the log refuses it
    (``services.append``), as it refuses NUL."""
    return _path_where(value, path, holds_surrogate)


# Floats whose canonical text PostgreSQL's ``jsonb`` does not give back: it stores a
# number as ``numeric``, so ``1e+20`` (Python writes an exponent from 1e16 on) reads back
# as the integer 100000000000000000000, and ``-0.0`` as ``0.0``. Their event's hash,
# over the text as written, then no longer matched what the log read back (QA, HIGH).
_EXPONENT_FROM = 1e16


def _unstored(number: float) -> bool:
    return abs(number) >= _EXPONENT_FROM or (number == 0.0 and math.copysign(1.0, number) < 0)


def may_hold_unstored_number(text: str) -> bool:
    """Whether the canonical JSON ``text`` may hold such a float (a cheap test of the
    text, for the append path: only then is the value walked)."""
    return "e+" in text or "-0.0" in text


def unstored_number(value: Any, path: str = "data") -> str | None:
    """The path of the first float in ``value`` that ``jsonb`` would not give back as
    ``canonical_json`` writes it (None: none), as :func:`nul_path` says where a NUL is."""
    return _path_where(value, path, _unstored, kind=float)


def with_stored_numbers(value: Any) -> Any:
    """``value`` with each float :func:`unstored_number` finds written as ``jsonb`` gives
    it back, on every engine (a log reads the same on both): a float of 1e16 or more is
    the integer it is (every such double is one), ``-0.0`` is ``0.0``. Same numbers,
    text that survives the round trip."""
    if isinstance(value, float) and _unstored(value):
        return 0.0 if value == 0.0 else int(value)
    if isinstance(value, Mapping):
        return {key: with_stored_numbers(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [with_stored_numbers(child) for child in value]
    return value
