"""How the URLs of the environment become Django's ``DATABASES``, ``CHANNEL_LAYERS`` and
``CACHES`` entries, tuned for Forge: one function per kind of backend.

``base`` calls them with the environment's URLs; ``test`` with the test run's; tests
that start servers of their own call them too. They read nothing but their arguments,
and ``FORGE_DB_POOL`` / ``FORGE_CHANNEL_LAYER`` when no pool or layer is given.
"""

from __future__ import annotations

from typing import Any

import dj_database_url

from .env import env_int, env_str


def database_config(url: str, *, pool: int | None = None) -> dict[str, Any]:
    """One ``DATABASES`` entry from a URL, tuned for Forge's write pattern.

    PostgreSQL: a connection pool of ``pool`` connections per process (default
    ``FORGE_DB_POOL``, 8; 0: a new connection per unit of work, as Django does).
    Row-level security stays exact on a pooled connection: ``forge.db.postgresql``
    sets the role and re-sends the visible tenants on every checkout.

    SQLite: WAL journal, ``synchronous=NORMAL`` (durable across process crashes,
    the WAL recommendation), a busy timeout, and ``BEGIN IMMEDIATE`` for every
    transaction so concurrent writers queue on the lock instead of failing with
    "database is locked" on a read-to-write upgrade; and ``forge.db.sqlite3``, Django's
    backend remembering each statement's placeholder conversion.
    """
    config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    if config["ENGINE"] == "django.db.backends.sqlite3":
        options = config.setdefault("OPTIONS", {})
        options.setdefault(
            "init_command",
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;",
        )
        options.setdefault("transaction_mode", "IMMEDIATE")
        options.setdefault("timeout", 30)
        # Django's backend, the placeholder conversion of each statement remembered.
        config["ENGINE"] = "forge.db.sqlite3"
    elif config["ENGINE"] == "django.db.backends.postgresql":
        # Django's backend plus the application role of row-level security.
        config["ENGINE"] = "forge.db.postgresql"
        config["CONN_HEALTH_CHECKS"] = True
        # A pool per process (Django's psycopg pool): Channels closes a consumer's
        # connection after every database_sync_to_async call, and without a pool each
        # call opened a new connection, a new server process, before a prompt could start.
        if pool is None:
            pool = env_int("FORGE_DB_POOL", 8)
        if pool > 0:
            options = config.setdefault("OPTIONS", {})
            options["pool"] = {"min_size": 1, "max_size": pool, "timeout": 30}
    return config


def replica_config(url: str, *, pool: int | None = None) -> dict[str, Any]:
    """The ``replica`` entry: as the primary's, with a short connect timeout (a replica
    that is away must cost a read little before it falls back to the primary); under
    tests it mirrors ``default``, so the suite's test database serves both."""
    config = database_config(url, pool=pool)
    if config["ENGINE"] == "forge.db.postgresql":
        options = config.setdefault("OPTIONS", {})
        options.setdefault("connect_timeout", 2)
        if isinstance(options.get("pool"), dict):
            # The pool's wait for a connection, not the connect timeout, bounds a read
            # while the replica is down: at the primary's 30 s, each such read (and the
            # process's one sync thread, every request behind it) waited 30 s.
            options["pool"]["timeout"] = 2
    config["TEST"] = {"MIRROR": "default"}
    return config


def channel_layers(
    redis_url: str | list[str], *, prefix: str = "forge", layer: str | None = None
) -> dict[str, Any]:
    layer = layer or env_str("FORGE_CHANNEL_LAYER", "pubsub")
    urls = [redis_url] if isinstance(redis_url, str) else redis_url
    urls = [url for url in urls if url]
    if not urls:
        return {
            "default": {
                "BACKEND": "forge.inmemory.InMemoryChannelLayer",
                "CONFIG": {"capacity": 1000, "expiry": 60},
            }
        }
    # channels-redis waits on an idle channel with a 5 s BZPOPMIN; redis-py (8+) gives
    # up reading after 5 s by default, so a receive could time out just as the server
    # answered, losing the message it had popped. Read for longer than the wait.
    hosts = [{"address": url, "socket_timeout": 10, "health_check_interval": 15} for url in urls]
    if layer == "pubsub":
        return {
            "default": {
                "BACKEND": "forge.pubsub.PubSubChannelLayer",
                "CONFIG": {"hosts": hosts, "prefix": prefix},
            }
        }
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": hosts, "prefix": prefix, "capacity": 1000, "expiry": 60},
        }
    }


def caches(redis_url: str, *, prefix: str = "forge") -> dict[str, Any]:
    if not redis_url:
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    return {
        "default": {
            "BACKEND": "forge.cache.RedisCache",
            "LOCATION": redis_url,
            "KEY_PREFIX": prefix,
            # The cache holds throttle history only, and throttles fail open
            # (forge.throttling): an unresponsive Redis must cost a request a second,
            # not hang it (redis-py waits for ever by default).
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
