"""Security headers Django does not set itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

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
