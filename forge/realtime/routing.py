"""Socket routes. A path that names no route is closed with 4404 (like a session that
does not exist), not left to the router's error and a 1011 close."""

from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import path, re_path

from .consumer import CLOSE_NOT_FOUND, SessionConsumer


class NoRoute(AsyncWebsocketConsumer):
    channel_layer_alias = None

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)


websocket_urlpatterns = [
    path("ws/sessions/<str:session_id>/", SessionConsumer.as_asgi()),
    re_path(r"", NoRoute.as_asgi()),
]
