"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from .middleware import WebSocketSameOriginMiddleware  # noqa: E402
from .routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # The Origin's host must be an allowed host, and the very site the socket was opened
        # on, port included (see `same_origin`).
        "websocket": AllowedHostsOriginValidator(
            WebSocketSameOriginMiddleware(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
