"""Authentication for the socket: the session cookie (browsers) or ``Authorization:
Token <key>`` on the handshake (other clients). Never a token in the URL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any

from channels.auth import AuthMiddlewareStack, get_user
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from forge.access import session_of, user_for_authorization


def authorization(scope: dict[str, Any]) -> bytes | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return bytes(value)
    return None


async def current_user(scope: dict[str, Any]) -> Any:
    """The socket's user as of now: its token authenticated again, or its
    session cookie's session read again from the session store. A deleted token,
    an inactive user, or a session that was logged out is an anonymous user."""
    header = authorization(scope)
    if header is not None:
        return await database_sync_to_async(user_for_authorization)(header or b" ")
    cookie = scope.get("session")
    key = getattr(cookie, "session_key", None)
    if not key:
        return AnonymousUser()
    fresh = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
    return await get_user({**scope, "session": fresh})


async def recheck(scope: dict[str, Any], session_id: str) -> None:
    """Raise (``NotAuthenticated``, ``NoTenant``, ``NotFound``) when the caller of
    ``scope`` (a socket's, or an HTTP stream's ``headers`` and ``session``) may no longer
    watch session ``session_id``, as :func:`forge.access.session_of` would refuse a
    request of theirs now: an open stream's ``live_frames`` recheck."""
    user = await current_user(scope)
    await database_sync_to_async(session_of)(user, session_id)


def recheck_for(request: Any, session_id: str) -> Callable[[], Awaitable[None]]:
    """:func:`recheck` for an HTTP stream (a Django ``HttpRequest``): the caller as the
    request named them, its ``Authorization`` header, else its session cookie's
    session read again."""
    header = request.headers.get("Authorization", "")
    scope: dict[str, Any] = {"session": getattr(request, "session", None)}
    if header:
        scope["headers"] = [(b"authorization", header.encode("latin-1"))]
    return lambda: recheck(scope, session_id)


class TokenAuthMiddleware(BaseMiddleware):
    """An ``Authorization`` header decides who the socket's user is; otherwise the cookie."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if authorization(scope) is not None:
            scope = {**scope, "user": await current_user(scope)}
        return await super().__call__(scope, receive, send)


def SocketAuthStack(inner: Any) -> Any:
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))
