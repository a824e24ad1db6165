"""WebSocket routes."""

from __future__ import annotations

from django.urls import URLPattern, path

from conversations.consumers import ChatConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/chat/", ChatConsumer.as_asgi()),
]
