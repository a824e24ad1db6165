"""The admin and the staff review pages send the site's strict Content-Security-Policy, and
hold no inline code that the policy would block (issue 14: the admin sent no CSP).

The policy allows no inline script, no `<style>`, no `style=` attribute and no event handler
attribute, so every admin page is fetched as a superuser (who sees every widget and action)
and read for them. `tests/browser/test_admin_browser.py` checks the same pages in chromium.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import NoReverseMatch, reverse

from chatrag.middleware import DEFAULT_CSP
from conversations.quality.models import RewriteFidelity
from retrieval.models import GlossaryEntry
from tests.conversations.quality.test_review import CPF, _review_urls, make_turn

pytestmark = pytest.mark.django_db

NON_SCRIPT_TYPES = {"application/json", "application/ld+json", "text/template"}


class InlineCode(HTMLParser):
    """Collect what a `script-src 'self'; style-src 'self'` policy would refuse."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        for name, value in values.items():
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=…> (event handler attribute)")
            if name == "style":
                self.found.append(f"<{tag} style={value!r}> (inline style attribute)")
            if name in {"href", "src", "action", "formaction"} and value.strip().lower().startswith(
                "javascript:"
            ):
                self.found.append(f"<{tag} {name}={value!r}> (javascript: URL)")
            if name in {"href", "src"} and value.startswith(("http:", "https:", "//")):
                if tag in {"script", "link", "img", "iframe"}:
                    self.found.append(f"<{tag} {name}={value!r}> (another origin)")
        if tag == "style":
            self.found.append("<style> element")
        if tag in {"iframe", "object", "embed", "frame"}:
            self.found.append(f"<{tag}> element")
        if tag == "script":
            kind = values.get("type", "").strip().lower()
            if kind in NON_SCRIPT_TYPES:
                self._in = None
            else:
                self._in = "src" if "src" in values else "inline"
            if self._in == "inline":
                self.found.append("<script> without src (inline script)")

    def handle_data(self, data: str) -> None:
        if self._in == "src" and data.strip():
            self.found.append(f"<script src> with a body: {data.strip()[:60]!r}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in = None


def inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    parser.close()
    return parser.found


def test_the_reader_finds_what_the_policy_would_block() -> None:
    """The page reader must not be blind: each kind of inline code is reported."""
    html = (
        '<div style="width: 3%">x</div><a href="javascript:go()">a</a><b onclick="x()">b</b>'
        "<style>p{}</style><script>alert(1)</script><script src=/a.js>alert(2)</script>"
        '<script id="d" type="application/json">{"a": 1}</script><script src="/ok.js"></script>'
        '<svg><rect width="37.5" height="1"/></svg>'
    )
    found = inline_code(html)
    assert len(found) == 6, found
    assert inline_code('<svg class="review-bar"><rect width="37.5" height="1"/></svg>') == []


def _admin_urls(turn: Any) -> list[str]:
    """Every admin page a superuser can open: index, app pages, every model's list, add and
    change pages, and the review pages with their extra views."""
    urls = [reverse("admin:index"), reverse("admin:password_change")]
    urls += [url for method, url in _review_urls(turn) if method == "get"]
    for model in admin.site._registry:
        opts = model._meta
        urls.append(reverse("admin:app_list", args=[opts.app_label]))
        for view in ("changelist", "add"):
            try:
                urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}"))
            except NoReverseMatch:  # a model admin without an add page
                pass
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            name = f"admin:{opts.app_label}_{opts.model_name}_change"
            urls.append(reverse(name, args=[first.pk]))
    urls.append(reverse("admin:quality_evaluationrun_playground"))
    return list(dict.fromkeys(urls))


@pytest.fixture
def staff_world(small_kb: Any, personas: dict[str, User]) -> tuple[Client, list[str]]:
    """A superuser's client, a turn with a trace (timings bars, hits, feedback), the small
    knowledge base, and a group and a user to open."""
    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    turn = make_turn(personas["ana"], f"regra do VR? meu CPF é {CPF}", thumbs=-1)
    RewriteFidelity.objects.create(message=turn.question, policy="rules-test")  # its review page
    assert Group.objects.exists() and GlossaryEntry.objects.exists()
    client = Client()
    client.force_login(boss)
    return client, _admin_urls(turn)


def test_every_admin_page_sends_the_strict_policy_and_holds_no_inline_code(
    staff_world: tuple[Client, list[str]],
) -> None:
    client, urls = staff_world
    assert len(urls) > 40, urls  # every registered model's list, add and change pages
    opened, problems = 0, {}
    for url in urls:
        response = client.get(url)
        # 403: an add page no one may use (traces, the access log); it sends the policy too.
        assert response.status_code in {200, 302, 403}, (url, response.status_code)
        assert response["Content-Security-Policy"] == DEFAULT_CSP, url
        assert response["X-Frame-Options"] == "DENY", url
        assert response["X-Content-Type-Options"] == "nosniff", url
        assert response["Referrer-Policy"] == "same-origin", url
        assert "camera=()" in response["Permissions-Policy"], url
        if response.status_code == 200 and "html" in response.get("Content-Type", ""):
            opened += 1
            if found := inline_code(response.content.decode()):
                problems[url] = found
    assert opened > 40
    assert problems == {}


def test_the_admin_login_and_a_refused_page_send_the_policy(client: Client) -> None:
    for url in (reverse("admin:login"), reverse("admin:conversations_conversation_changelist")):
        response = client.get(url)
        assert response["Content-Security-Policy"] == DEFAULT_CSP, url
    login = client.get(reverse("admin:login"))
    assert inline_code(login.content.decode()) == []
    assert "'unsafe-inline'" not in DEFAULT_CSP and "'unsafe-eval'" not in DEFAULT_CSP
