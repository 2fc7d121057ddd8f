"""Authentication for the socket: the session cookie (browsers) or ``Authorization:
Token <key>`` on the handshake (other clients). Never a token in the URL."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware

from forge.access import user_for_authorization


def _authorization(scope: dict[str, Any]) -> bytes | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return bytes(value)
    return None


class TokenAuthMiddleware(BaseMiddleware):
    """An ``Authorization`` header decides who the socket's user is; otherwise the cookie."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        header = _authorization(scope)
        if header is not None:
            user = await database_sync_to_async(user_for_authorization)(header or b" ")
            scope = {**scope, "user": user}
        return await super().__call__(scope, receive, send)


def SocketAuthStack(inner: Any) -> Any:
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))
