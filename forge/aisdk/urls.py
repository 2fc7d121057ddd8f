from django.urls import path

from .views import ChatMessagesView, ChatStopView, ChatStreamView, ChatView

urlpatterns = [
    path("chat", ChatView.as_view(), name="aisdk-chat"),
    path("chat/<str:chat_id>/stream", ChatStreamView.as_view(), name="aisdk-chat-stream"),
    path("chat/<str:chat_id>/messages", ChatMessagesView.as_view(), name="aisdk-chat-messages"),
    path("chat/<str:chat_id>/stop", ChatStopView.as_view(), name="aisdk-chat-stop"),
]
