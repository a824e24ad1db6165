"""Login throttling glue for django-axes: the lockout page and the client address it counts by.

- A locked-out attempt gets the login page again (status 429) with the lockout explained in
  the user's language, not the "wrong password" message: the password may well be right.
- The client address is the peer's unless `CHATRAG_PROXY_COUNT` proxies sit in front, each
  appending to X-Forwarded-For; only the entries those proxies wrote are trusted.
- The username is counted as typed but cut to what a username can be: Django's login forms
  do not enforce its length, and axes' column is shorter than what a client can post.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import ngettext

MAX_USERNAME_CHARS = 150  # django.contrib.auth's User.username


def client_ip(request: HttpRequest) -> str:
    """The address login attempts are counted by."""
    peer = str(request.META.get("REMOTE_ADDR", ""))
    proxies = settings.CHATRAG_PROXY_COUNT
    if proxies <= 0:
        return peer
    hops = [h.strip() for h in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    hops = [h for h in hops if h]
    # The last `proxies` entries were appended by our proxies; anything before is the client's.
    return hops[-proxies] if len(hops) >= proxies else peer


def login_username(request: HttpRequest, credentials: dict[str, Any] | None = None) -> str:
    """The username login attempts are counted by (any login form, the admin's included)."""
    if credentials:
        raw = credentials.get("username")
    else:
        raw = getattr(request, "POST", {}).get("username")
    return str(raw or "")[:MAX_USERNAME_CHARS]


def login_locked_out(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """The login page, saying that this username is locked out for a while from here."""
    minutes = max(1, math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    message = ngettext(
        "Muitas tentativas sem sucesso. Por segurança, o acesso foi bloqueado; "
        "tente de novo em %(minutes)d minuto.",
        "Muitas tentativas sem sucesso. Por segurança, o acesso foi bloqueado; "
        "tente de novo em %(minutes)d minutos.",
        minutes,
    ) % {"minutes": minutes}
    username = str(request.POST.get("username", ""))[:MAX_USERNAME_CHARS]
    form = AuthenticationForm(request, initial={"username": username})
    return render(
        request,
        "registration/login.html",
        {"form": form, "locked_out": message, "next": request.POST.get("next", "")},
        status=429,
    )
