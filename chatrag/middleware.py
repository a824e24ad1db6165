"""Security headers Django does not set itself."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

# The pages load only their own scripts and styles (no inline code: data goes through
# json_script), and talk only to their own origin (HTTP and the chat WebSocket).
DEFAULT_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; frame-ancestors 'none'; "
    "base-uri 'self'; form-action 'self'"
)


class SecurityHeadersMiddleware:
    """Add a Content-Security-Policy and a Permissions-Policy to every response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.csp = getattr(settings, "CHATRAG_CONTENT_SECURITY_POLICY", DEFAULT_CSP)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # The admin ships inline scripts; it is staff-only and keeps Django's own defaults.
        if self.csp and not request.path.startswith("/admin/"):
            response.headers.setdefault("Content-Security-Policy", self.csp)
        response.headers.setdefault(
            "Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()"
        )
        return response
