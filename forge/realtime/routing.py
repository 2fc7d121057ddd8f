from django.urls import path

from .consumer import SessionConsumer

websocket_urlpatterns = [path("ws/sessions/<str:session_id>/", SessionConsumer.as_asgi())]
