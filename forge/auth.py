"""Authentication for the socket: the session cookie (browsers) or ``Authorization:
Token <key>`` on the handshake (other clients). Never a token in the URL."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.contrib.auth.models import AnonymousUser
from rest_framework.authtoken.models import Token


def _token_key(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            if scheme.lower() == "token":
                return key.strip()
            return ""  # another scheme: not a valid token
    return None


@database_sync_to_async
def _user_for(key: str) -> Any:
    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class TokenAuthMiddleware(BaseMiddleware):
    """An ``Authorization`` header decides who the socket's user is; otherwise the cookie."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        key = _token_key(scope)
        if key is not None:
            scope = {**scope, "user": await _user_for(key) if key else AnonymousUser()}
        return await super().__call__(scope, receive, send)


def SocketAuthStack(inner: Any) -> Any:
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))
