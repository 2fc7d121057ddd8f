"""Production settings. Refuse to start without a real secret key and hosts.

``DJANGO_SETTINGS_MODULE=forge.settings.production``; passes
``manage.py check --deploy --fail-level WARNING`` once ``FORGE_SECRET_KEY`` and
``FORGE_ALLOWED_HOSTS`` are set. Serve behind TLS; when a proxy terminates it,
set ``FORGE_SECURE_PROXY_SSL_HEADER=1`` (trusts ``X-Forwarded-Proto``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import ALLOWED_HOSTS, LOGGING, SECRET_KEY
from .env import env_bool, env_int, env_list, env_str

DEBUG = False

# The API answers JSON only: no browsable API, whose HTML pages DRF also chose for an
# error when a client's Accept header asked for HTML first (a browser's does).
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}

# One JSON object per log line, one line per turn end (forge/telemetry/logs.py), unless
# FORGE_LOG_FORMAT=plain.
FORGE_LOG_FORMAT = env_str("FORGE_LOG_FORMAT", "json")
if FORGE_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"FORGE_LOG_FORMAT: plain or json, not {FORGE_LOG_FORMAT!r}")
_handlers: Any = LOGGING["handlers"]
_handlers["console"]["formatter"] = FORGE_LOG_FORMAT

if not SECRET_KEY or len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
    raise ImproperlyConfigured(
        "FORGE_SECRET_KEY must be set to a random string of at least 50 characters "
        "(for example: python -c 'import secrets; print(secrets.token_urlsafe(64))')."
    )
if SECRET_KEY.startswith(("django-insecure", "dev-insecure")):
    raise ImproperlyConfigured("FORGE_SECRET_KEY is a development key; generate a real one.")
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("FORGE_ALLOWED_HOSTS must list the host names Forge serves.")

CSRF_TRUSTED_ORIGINS = env_list(
    "FORGE_CSRF_TRUSTED_ORIGINS", [f"https://{host.lstrip('.')}" for host in ALLOWED_HOSTS]
)
SECURE_SSL_REDIRECT = env_bool("FORGE_SECURE_SSL_REDIRECT", True)
if env_bool("FORGE_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = env_int("FORGE_HSTS_SECONDS", 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
