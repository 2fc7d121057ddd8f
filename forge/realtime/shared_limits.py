"""The per-user stream cap counted across every process, in Redis (issue 21, item 3).

``forge.realtime.limits`` counts a user's open streams per process; with ``REDIS_URL``
set, every stream also holds a slot in a Redis sorted set per user,
``<FORGE_REDIS_PREFIX>:streams:<user id>``: one member per open stream
(``<process token>:<n>``), scored by the time it expires. A stream is let open only
while the set, its expired members dropped, holds fewer than the limit (one Lua script,
so two processes never both take the last slot).

A slot expires ``SLOT_SECONDS`` after it was last renewed; a thread of each process
renews its own every third of that. So a process that dies (kill -9, a lost machine)
gives its slots back within ``SLOT_SECONDS``, with no one to clean up after it.

Fails open, as the throttles do (``forge.throttling``): when Redis cannot be reached,
a stream is counted by its process only, a warning is logged, and Redis is not asked
again for ``PAUSE_AFTER_FAILURE`` seconds. Its socket timeout is short: a frozen Redis
costs the process whose stream finds it half a second, not every stream of an outage.

The calls are synchronous, made where ``forge.realtime.hub`` takes and gives back a
slot (on the event loop): one loopback round trip per stream opened and closed. The
renewals run on their own thread.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

SLOT_SECONDS = 60.0
PAUSE_AFTER_FAILURE = 10.0
_TIMEOUT = 0.5

# KEYS[1] the user's set; ARGV: now, expiry, limit, member, key ttl (s). 1: taken.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

_PROCESS = uuid.uuid4().hex[:12]
_numbers = itertools.count(1)
_lock = threading.Lock()
_held: dict[int, list[str]] = {}  # user id -> members this process holds in Redis
_client: Any = None
_client_url = ""
_paused_until = 0.0
_renewer: threading.Thread | None = None


def _redis() -> Any:
    """A client of the first Redis of ``REDIS_URL``, or None without one."""
    global _client, _client_url
    url = settings.REDIS_URL
    if not url:
        return None
    if _client is None or _client_url != url:
        import redis

        _client = redis.Redis.from_url(
            url, socket_timeout=_TIMEOUT, socket_connect_timeout=_TIMEOUT
        )
        _client_url = url
    return _client


def key(user_id: int) -> str:
    return f"{settings.FORGE_REDIS_PREFIX}:streams:{user_id}"


def _failed(exc: Exception) -> None:
    global _paused_until
    _paused_until = time.monotonic() + PAUSE_AFTER_FAILURE
    logger.warning("stream cap: Redis unreachable, counting per process: %r", exc)


def ask_redis_again() -> None:
    """End a pause after a failure now (a test whose Redis came back)."""
    global _paused_until
    _paused_until = 0.0


def take(user_id: int, limit: int) -> bool:
    """Take a slot for one more stream of the user: False when every process together
    holds ``limit`` already. True without Redis, or when it fails (fail open)."""
    client = _redis()
    if client is None or time.monotonic() < _paused_until:
        return True
    member = f"{_PROCESS}:{next(_numbers)}"
    now = time.time()
    try:
        taken = client.eval(
            _TAKE, 1, key(user_id), now, now + SLOT_SECONDS, limit, member, int(SLOT_SECONDS * 2)
        )
    except Exception as exc:
        _failed(exc)
        return True
    if not taken:
        return False
    with _lock:
        _held.setdefault(user_id, []).append(member)
    _start_renewer()
    return True


def give_back(user_id: int) -> None:
    """Give back one slot this process holds for the user (none held: nothing to do)."""
    with _lock:
        members = _held.get(user_id)
        if not members:
            return
        member = members.pop()
        if not members:
            del _held[user_id]
    client = _redis()
    if client is None:
        return
    try:
        client.zrem(key(user_id), member)
    except Exception as exc:  # it expires on its own
        _failed(exc)


def renew() -> None:
    """Push the expiry of every slot this process holds ``SLOT_SECONDS`` ahead."""
    with _lock:
        held = {user_id: list(members) for user_id, members in _held.items()}
    client = _redis()
    if client is None or not held:
        return
    expiry = time.time() + SLOT_SECONDS
    try:
        pipe = client.pipeline(transaction=False)
        for user_id, members in held.items():
            pipe.zadd(key(user_id), dict.fromkeys(members, expiry), xx=True)
            pipe.expire(key(user_id), int(SLOT_SECONDS * 2))
        pipe.execute()
    except Exception as exc:
        _failed(exc)


def _start_renewer() -> None:
    global _renewer
    with _lock:
        if _renewer is not None and _renewer.is_alive():
            return
        _renewer = threading.Thread(target=_renew_forever, name="stream-slots", daemon=True)
        _renewer.start()


def _renew_forever() -> None:
    while True:
        time.sleep(SLOT_SECONDS / 3)
        renew()
