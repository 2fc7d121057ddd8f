"""Opaque, URL-safe ids that sort in creation order, for every store (the bottom layer
holds what the stores share; each store names its own prefixes).

``<prefix>_<26 chars>``: a ULID (48-bit millisecond time + 80 random bits) in
Crockford base32. Within one process ids are strictly increasing even within a
millisecond (the random part is incremented); across processes they sort by
millisecond.
"""

from __future__ import annotations

import re
import secrets
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")

_lock = threading.Lock()
_last_ms = 0
_last_random = 0


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    global _last_ms, _last_random
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_random + 1
            if rand > _RANDOM_MAX:
                ms += 1
                rand = secrets.randbits(_RANDOM_BITS - 1)
        else:
            # One bit of headroom, so increments within a millisecond never overflow in practice.
            rand = secrets.randbits(_RANDOM_BITS - 1)
        _last_ms, _last_random = ms, rand
    return f"{prefix}_{_encode((ms << _RANDOM_BITS) | rand)}"


def is_valid_id(value: object) -> bool:
    return isinstance(value, str) and ID_RE.fullmatch(value) is not None
