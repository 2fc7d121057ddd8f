"""The AI SDK routes under ``settings.FORGE_AI_SDK_PREFIX`` (default ``api/chat``, the
path ``useChat``'s ``DefaultChatTransport`` posts to)."""

from django.conf import settings
from django.urls import path

from .views import ChatMessagesView, ChatStopView, ChatStreamView, ChatView

prefix = settings.FORGE_AI_SDK_PREFIX
chat = f"{prefix}/<str:chat_id>"

urlpatterns = [
    path(prefix, ChatView.as_view(), name="aisdk-chat"),
    path(f"{chat}/stream", ChatStreamView.as_view(), name="aisdk-chat-stream"),
    path(f"{chat}/messages", ChatMessagesView.as_view(), name="aisdk-chat-messages"),
    path(f"{chat}/stop", ChatStopView.as_view(), name="aisdk-chat-stop"),
]
