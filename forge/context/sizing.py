"""The memory estimate of the incremental context's states
(:class:`forge.context.derived.Derived`), by CPython's own sizes, and the helpers that
rebuild a state's values so that what repeats is held once.

Invariant: :attr:`Derived.nbytes` is the state's estimated memory, kept up to date by the
fold (see :func:`held`); it depends only on what the state holds, so a state
folded to ``seq`` and one seeded at ``seq`` from the same log estimate alike
(unless a rolled cut moved forward meanwhile: the folded state still holds the
messages it hid, which a seed may not read). The snapshot memo's chunks are
counted apart (:attr:`Derived.memo_bytes`); the cache
(:mod:`forge.context.incremental`) holds at most ``FORGE_CONTEXT_CACHE_BYTES`` of both
(:attr:`Derived.cost`) in all, an upper bound of the memory the states hold (measured
with ``tracemalloc``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

# The estimate (see ``held``): the fixed cost of one message in a state beyond its
# info, parts and rendering (its ``items`` entry and ``{info, parts}`` dict, its
# parts list, its slots in ``order``, ``kept``, ``rendered`` and ``messages``, its
# ``sizes`` list: 600; its entries in ``appended`` and ``tool_tokens``, whether it has
# them or not: 128 and 152), and of a state (the dataclass, its containers, empty, and
# the ``rest`` tuple). From sys.getsizeof of each on CPython 3.11, a hash table's entry
# counted as just after the table grew (the most it costs an entry).
MESSAGE_OVERHEAD = 880
STATE_OVERHEAD = 4_000
# The request's length memos, per model message of ``messages``: its ``chars`` entry
# (the dict's slot, the (dict, length) tuple and the length: up to 152 + 56 + 32 by
# tracemalloc) and its ``prefix`` slot and sum (40). Counted with the rendering, whether
# the memos hold it yet or not (they do once the state is served again), so the
# estimate still depends only on what the state derives from.
MEMO_PER_MODEL_MESSAGE = 280
# String values up to this long are interned too: roles, part types, finish reasons,
# statuses, repeated in every turn. Longer ones (ids, times, texts) are mostly unique,
# and an interned string costs an entry in the interpreter's table.
INTERN_VALUES = 16
_POINTER = 8
_LIST = sys.getsizeof([])


def held(value: Any, shared: Mapping[str, str] | None = None) -> tuple[Any, int]:
    """``(value, bytes)``: a JSON value rebuilt with its strings shared where they
    repeat, and the memory it holds by CPython's own sizes (``sys.getsizeof`` of each
    dict, string and number; a list as its header and slots; ``None`` and booleans
    nothing).

    Each decoded event has its own copy of every key (``"message_id"``,
    ``"session_id"`` ...) and of every value, though most repeat in every event.
    Rebuilt, the keys and the short values (:data:`INTERN_VALUES`) are interned
    (``sys.intern``: one object per distinct string in the process, freed with its
    last user), and a value equal to a key of ``shared`` becomes that mapping's
    object (the session's id, the message's id in its parts). Counted as free: the
    keys (a small vocabulary) and the ``shared`` values (held once by the state);
    every other value is counted whether it ended up shared or not, so the number
    depends on the value alone (never on what else the process holds) and errs
    high. Equal strings, keys in the same order: the rebuilt value's JSON is the
    original's, byte for byte."""
    if isinstance(value, str):
        if shared is not None and value in shared:
            return shared[value], 0
        return (sys.intern(value) if len(value) <= INTERN_VALUES else value), sys.getsizeof(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        size = 0
        for key, item in value.items():
            out[sys.intern(key)], item_size = held(item, shared)
            size += item_size
        return out, size + sys.getsizeof(out)
    if isinstance(value, list):
        rebuilt = [held(item, shared) for item in value]
        return [v for v, _ in rebuilt], sum(n for _, n in rebuilt) + _LIST + _POINTER * len(value)
    if value is None or isinstance(value, bool):
        return value, 0  # singletons
    return value, sys.getsizeof(value)


def rebuilt(value: Any, shared: Mapping[str, str]) -> Any:
    """``held(value, shared)[0]`` without counting: for a value already counted (an item
    decoded from a snapshot chunk, whose sizes the chunk holds)."""
    if isinstance(value, str):
        if value in shared:
            return shared[value]
        return sys.intern(value) if len(value) <= INTERN_VALUES else value
    if isinstance(value, dict):
        return {sys.intern(key): rebuilt(item, shared) for key, item in value.items()}
    if isinstance(value, list):
        return [rebuilt(item, shared) for item in value]
    return value


def size_of(value: Any) -> int:
    """What :func:`held` counts for ``value`` without ``shared``, without rebuilding it."""
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(size_of(v) for v in value.values())
    if isinstance(value, list):
        return _LIST + _POINTER * len(value) + sum(size_of(v) for v in value)
    if value is None or isinstance(value, bool):
        return 0
    return sys.getsizeof(value)


def rendering_bytes(rendering: list[dict[str, Any]], item: Mapping[str, Any]) -> int:
    """The memory one message's rendering holds beyond its item's: counted like
    :func:`held`, less a content string that is its part's text itself (a message
    of one text part renders to that very string object), plus the request's length
    memos for each of its model messages (:data:`MEMO_PER_MODEL_MESSAGE`)."""
    texts = {id(part["text"]) for part in item["parts"] if isinstance(part.get("text"), str)}
    size = size_of(rendering) + MEMO_PER_MODEL_MESSAGE * len(rendering)
    for message in rendering:
        content = message.get("content")
        if isinstance(content, str) and id(content) in texts:
            size -= sys.getsizeof(content)
    return size


def share_texts(rendering: list[dict[str, Any]], item: Mapping[str, Any]) -> None:
    """Make a decoded rendering's contents that equal a text of its item's parts that
    very string, as :func:`forge.context.messages.item_messages` renders them (a
    message of one text part renders to the part's text itself), and as
    :func:`rendering_bytes` counts them: decoded apart, each would be held twice. The
    value is an equal string, so the message's JSON (and its length memo) is the same;
    the dict is changed in place, its key's value swapped, nothing else."""
    texts = {p["text"]: p["text"] for p in item["parts"] if isinstance(p.get("text"), str)}
    if not texts:
        return
    for message in rendering:
        content = message.get("content")
        if isinstance(content, str):
            text = texts.get(content)
            if text is not None and text is not content:
                message["content"] = text


def held_info(data: dict[str, Any], session_id: str) -> tuple[dict[str, Any], int]:
    """A message's info as a state holds it (:func:`held`): its session id shared."""
    info, size = held(data, {session_id: session_id})
    return info, size


def held_part(data: dict[str, Any], session_id: str, message_id: str) -> tuple[dict[str, Any], int]:
    """A part as a state holds it (:func:`held`): its session's and its message's ids
    shared (the message's is counted with its info)."""
    part, size = held(data, {session_id: session_id, message_id: message_id})
    return part, size
