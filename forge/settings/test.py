"""Settings for the test suite.

Two stacks, chosen by ``FORGE_TEST_STACK`` (the Makefile runs both):

* ``embedded`` (default): SQLite in a temporary file (WAL, so threads and
  processes can share it) and the in-memory channel layer.
* ``server``: PostgreSQL from ``FORGE_TEST_DATABASE_URL`` and Redis from
  ``FORGE_TEST_REDIS_URL``. ``tests/conftest.py`` refuses to run (fails under
  ``CI=true``) when they are missing or unreachable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .backends import caches, channel_layers, database_config
from .base import *  # noqa: F403
from .env import env_str

SECRET_KEY = "test-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

FORGE_TEST_STACK = env_str("FORGE_TEST_STACK", "embedded")
FORGE_TEST_DATABASE_URL = env_str("FORGE_TEST_DATABASE_URL")
FORGE_TEST_REDIS_URL = env_str("FORGE_TEST_REDIS_URL")
_run_tag = f"forge-test-{os.getpid()}"

if FORGE_TEST_STACK == "server" and FORGE_TEST_DATABASE_URL:
    # No pool in process: the test database must be droppable at the end. The servers
    # the tests start (forge.settings.dev) use one.
    DATABASES = {"default": database_config(FORGE_TEST_DATABASE_URL, pool=0)}
else:
    _sqlite_file = os.path.join(tempfile.gettempdir(), f"{_run_tag}.sqlite3")
    DATABASES = {"default": database_config(f"sqlite:///{_sqlite_file}")}
    DATABASES["default"]["TEST"] = {"NAME": _sqlite_file}

if FORGE_TEST_STACK == "server" and FORGE_TEST_REDIS_URL:
    REDIS_URL = FORGE_TEST_REDIS_URL
    CHANNEL_LAYERS = channel_layers(FORGE_TEST_REDIS_URL, prefix=_run_tag)
    CACHES = caches(FORGE_TEST_REDIS_URL, prefix=_run_tag)
    FORGE_REDIS_PREFIX = FORGE_INFLIGHT_PREFIX = _run_tag
else:
    REDIS_URL = ""
    CHANNEL_LAYERS = channel_layers("")
    CACHES = caches("")

STATIC_ROOT = None  # type: ignore[assignment]  # tests serve static files from the finders
WHITENOISE_USE_FINDERS = True

FORGE_ECHO_DELAY = 0.0
# Memory's embedder in the whole suite: a small deterministic one defined in the tests
# (hashed character trigrams), never the offline model; a test may set another.
FORGE_MEMORY_EMBEDDER = env_str("FORGE_TEST_MEMORY_EMBEDDER", "tests.memory.embedders.hashed")
# Every scripted session of the suite proves the incremental context equals the
# full derivation, byte for byte (forge.context.incremental.verify).
FORGE_CONTEXT_VERIFY = True
FORGE_WORKSPACE_ROOT = Path(tempfile.gettempdir()) / f"{_run_tag}-workspaces"
FORGE_LEASE_SECONDS = 5.0
FORGE_LEASE_JANITOR = False  # started explicitly by the tests that need it
FORGE_RECOVER_ON_START = False  # importing forge.asgi must not touch the database
# Throttle history lives in the cache, across tests: only the rate-limit test limits.
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {"user": "1000000/min", "prompts": "1000000/min"},
}
