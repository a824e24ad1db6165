"""Security headers Django does not set itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http import HttpRequest, HttpResponse

# Every page, the admin and the staff review pages included, loads only its own scripts and
# styles (no inline code: data goes through json_script or data- attributes, bar widths are
# SVG attributes), and talks only to its own origin (HTTP and the chat WebSocket). Django's
# admin needs no inline code either; `test_admin_csp.py` reads every admin page for it.
DEFAULT_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; frame-ancestors 'none'; "
    "base-uri 'self'; form-action 'self'"
)


class SecurityHeadersMiddleware:
    """Add a Content-Security-Policy and a Permissions-Policy to every response, admin included."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.csp = getattr(settings, "CHATRAG_CONTENT_SECURITY_POLICY", DEFAULT_CSP)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.csp:
            response.headers.setdefault("Content-Security-Policy", self.csp)
        response.headers.setdefault(
            "Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()"
        )
        return response


access_log = logging.getLogger("chatrag.access")


class AccessLogMiddleware:
    """One line per request, without the query string: an admin search (`?q=<a CPF>`) or
    any other GET parameter never reaches the server's log. It replaces daphne's own access
    log, which writes the whole URL (the servers run with `-v 0`:
    `chatrag.dev.server.daphne_command`)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        user = getattr(request, "user", None)
        who = str(user.pk) if user is not None and user.is_authenticated else "-"
        access_log.info(
            "%s %s %s %.0fms user=%s",
            request.method,
            request.path,
            response.status_code,
            (time.perf_counter() - started) * 1000,
            who,
        )
        return response


_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def _host_port(netloc: str, scheme: str = "") -> tuple[str, str]:
    """(host, port) of "host[:port]" ("[v6]:port" too); no port: the scheme's default, if any."""
    host, _, port = netloc.rpartition(":") if not netloc.endswith("]") else (netloc, "", "")
    if not host or not port.isdigit():
        host, port = netloc, ""
    return host.lower(), port or _DEFAULT_PORTS.get(scheme, "")


def same_origin(origin: str, host: str, trusted: list[str]) -> bool:
    """Whether a WebSocket handshake's Origin is the site it was sent to: the Host it names,
    port included (no port in the Host: the Origin's scheme's default), or a trusted origin.

    Channels' AllowedHostsOriginValidator matches host names only: a page on any other port
    of an allowed host (http://127.0.0.1:9999, a tool beside the app) opened the chat socket
    with the user's cookies (they are the same site) and read their conversations.
    """
    if origin in trusted:
        return True
    scheme, sep, netloc = origin.partition("://")
    if not sep or not netloc or "/" in netloc or not host:
        return False
    scheme = scheme.lower()
    origin_host, origin_port = _host_port(netloc, scheme)
    wanted_host, wanted_port = _host_port(host)
    return origin_host == wanted_host and origin_port == (
        wanted_port or _DEFAULT_PORTS.get(scheme, "")
    )


class WebSocketSameOriginMiddleware:
    """Refuse a WebSocket handshake whose Origin is not `same_origin` (ASGI middleware)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1")
        if scope.get("type") == "websocket" and not same_origin(
            origin, host, list(settings.CSRF_TRUSTED_ORIGINS)
        ):
            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)
