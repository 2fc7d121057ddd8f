"""Failed sign-ins, counted: the login page and the admin's refuse a name after too many.

Neither Django's ``LoginView`` nor the admin's login limits password guessing (100
wrong passwords in 32 s were all answered, and the right one after them let in). Here
each failure counts against the pair (username, client address) in the cache, for
``FORGE_LOGIN_LOCKOUT_SECONDS``; at ``FORGE_LOGIN_FAILURES`` the pair is refused, even
with the right password, until the window passes. A success clears its pair.

The pair, not the address alone: behind a proxy every client may share one address,
and one user's typos must not lock everyone out; not the name alone either, so that
a stranger elsewhere cannot lock a user out of their own machine's sign-in. Like the
API's throttles (``forge.throttling``) it fails open: without a reachable cache,
sign-ins are not counted (and a warning is logged).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache

logger = logging.getLogger(__name__)


def _key(request: Any, username: str) -> str:
    address = (request.META.get("REMOTE_ADDR") or "") if request is not None else ""
    digest = hashlib.sha256(f"{username.casefold()}\0{address}".encode()).hexdigest()[:32]
    return f"login-failures:{digest}"


def _failures(key: str) -> int:
    try:
        return int(cache.get(key, 0))
    except Exception as exc:  # the cache is away: fail open
        logger.warning("login guard cache unreachable: %s", type(exc).__name__)
        return 0


def _count(key: str) -> None:
    window = int(settings.FORGE_LOGIN_LOCKOUT_SECONDS)
    try:
        if not cache.add(key, 1, timeout=window):
            cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window)
    except Exception as exc:
        logger.warning("login guard cache unreachable: %s", type(exc).__name__)


def _clear(key: str) -> None:
    try:
        cache.delete(key)
    except Exception as exc:
        logger.warning("login guard cache unreachable: %s", type(exc).__name__)


class GuardedLogin:
    """``clean()`` of an authentication form, refusing a pair over its failures."""

    request: Any
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        key = _key(self.request, username)
        if username and _failures(key) >= int(settings.FORGE_LOGIN_FAILURES):
            minutes = max(1, int(settings.FORGE_LOGIN_LOCKOUT_SECONDS) // 60)
            raise forms.ValidationError(
                f"Too many failed sign-ins for this name: try again in {minutes} minutes.",
                code="too_many_failures",
            )
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError as exc:
            if username and getattr(exc, "code", None) == "invalid_login":
                _count(key)
            raise
        _clear(key)
        return cleaned


class LoginForm(GuardedLogin, AuthenticationForm):
    pass


class AdminLoginForm(GuardedLogin, AdminAuthenticationForm):
    pass
