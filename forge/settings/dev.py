"""Development settings: what ``make run`` uses. Safe defaults, never for production."""

from __future__ import annotations

from .base import *  # noqa: F403
from .env import env_bool, env_list, env_str

SECRET_KEY = env_str("FORGE_SECRET_KEY", "dev-insecure-forge-key-change-me-in-production")
DEBUG = env_bool("FORGE_DEBUG", True)
ALLOWED_HOSTS = env_list("FORGE_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
WHITENOISE_USE_FINDERS = DEBUG  # serve static files without collectstatic while developing
