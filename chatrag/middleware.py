"""Security headers Django does not set itself."""

from __future__ import annotations

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
