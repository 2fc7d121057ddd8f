"""Django's Redis cache backend, with one client per process instead of one per request.

Under ASGI, Django keeps ``caches`` per asyncio context (``asgiref.local.Local``), so
every request builds a new ``RedisCache``, and with it a new ``RedisCacheClient``
with connection pools of its own: each request that touched the cache (the
throttles do, on every API call) opened a new TCP connection to Redis and left the
old one to the garbage collector. Measured under daphne: 22 new Redis connections
for 20 API requests (``redis-cli info stats``, ``total_connections_received``).

Here every ``RedisCache`` of the process with the same servers and options shares
one client, so one pool of connections. The client only holds pools, and redis-py's
pools are thread safe and reset themselves in a forked child.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any, ClassVar

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient


class RedisCache(DjangoRedisCache):
    """``django.core.cache.backends.redis.RedisCache`` whose client (and so its connection
    pools) is shared by every instance of the process with the same configuration
    (``CACHES`` ``BACKEND``: ``forge.cache.RedisCache``)."""

    _clients: ClassVar[dict[tuple[Any, ...], RedisCacheClient]] = {}
    _clients_lock: ClassVar[threading.Lock] = threading.Lock()

    @cached_property
    def _cache(self) -> RedisCacheClient:
        # Django's own attributes (set in its __init__; its stubs leave them out).
        make: Any = vars(self)["_class"]
        servers: list[str] = vars(self)["_servers"]
        options: dict[str, Any] = vars(self)["_options"]
        key = (make, tuple(servers), repr(sorted(options.items())))
        with self._clients_lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = make(servers, **options)
        return client
