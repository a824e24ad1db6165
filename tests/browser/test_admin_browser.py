"""The admin works in a real browser under the site's strict Content-Security-Policy (issue 14).

Chromium reports every blocked inline script, style or handler both as a console error
("Refused to … because it violates the following Content Security Policy directive") and as a
`securitypolicyviolation` event; the test listens for both on every page it opens, and checks
that the admin's own scripts ran (the action counter, the two-box group selector).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from .conftest import DEMO_PASSWORDS, SCREENSHOTS, E2EDatabase
from .test_chat import ask, login

pytestmark = pytest.mark.browser

# Runs before any page script on every navigation; CDP-injected code is not under the CSP.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(
    `${e.violatedDirective} blocked ${e.blockedURI || "inline"}: ${e.sample || ""}`
  );
});
"""


class Violations:
    """What the CSP refused on a page, from the console and from the DOM event."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[str] = []
        page.add_init_script(RECORD_VIOLATIONS)
        page.on("console", self._on_console)
        page.on("response", self._on_response)

    def _on_console(self, message: Any) -> None:
        if "Content Security Policy" in message.text:
            self.console.append(f"{message.type}: {message.text}")

    def _on_response(self, response: Any) -> None:
        # A script or stylesheet the page names but cannot load breaks it as surely.
        if response.status >= 400 and response.request.resource_type in {"script", "stylesheet"}:
            self.console.append(f"{response.status}: {response.url}")

    def open(self, url: str) -> list[str]:
        """Go to `url`, let its deferred scripts run, and return what was refused there."""
        before = len(self.console)
        response = self.page.goto(url)
        assert response is not None and response.status == 200, url
        assert "script-src 'self'" in (response.headers.get("content-security-policy") or "")
        self.page.wait_for_load_state("load")
        self.page.wait_for_timeout(300)  # the violation events are queued as tasks
        events: list[str] = self.page.evaluate("window.__cspViolations || []")
        return self.console[before:] + events


def test_admin_lists_and_forms_run_under_the_policy(
    browser: Any, page: Page, live_url: str, e2e_db: E2EDatabase
) -> None:
    # A turn of Ana's, so that the timeline and the turn page have hits and timing bars.
    employee = browser.new_context(locale="pt-BR")
    try:
        chat = employee.new_page()
        login(chat, live_url, "ana")
        ask(chat, "Qual a regra do VR no home?")
    finally:
        employee.close()
    [(conversation_id, trace_id)] = e2e_db.query(
        "SELECT c.id, t.id FROM conversations_conversation c"
        " JOIN auth_user u ON u.id = c.owner_id AND u.username = 'ana'"
        " JOIN conversations_message m ON m.conversation_id = c.id"
        " JOIN conversations_turntrace t ON t.message_id = m.id"
        " ORDER BY t.id DESC LIMIT 1"
    )
    [(document_id,)] = e2e_db.query("SELECT min(id) FROM retrieval_document")
    [(user_id,)] = e2e_db.query("SELECT id FROM auth_user WHERE username = 'rita'")

    seen = Violations(page)
    assert seen.open(live_url + "/admin/login/") == []
    page.locator("#id_username").fill("admin")
    page.locator("#id_password").fill(DEMO_PASSWORDS["admin"])
    page.locator("input[type=submit]").click()
    page.wait_for_url(live_url + "/admin/")

    admin = live_url + "/admin"
    refused: dict[str, list[str]] = {}
    pages = {
        "index": admin + "/",
        "document list": admin + "/retrieval/document/",
        "document form": admin + f"/retrieval/document/{document_id}/change/",
        "conversation list": admin + "/conversations/conversation/",
        "timeline": admin + f"/conversations/conversation/{conversation_id}/change/",
        "turn": admin + f"/conversations/turntrace/{trace_id}/change/",
        "retry": admin + f"/conversations/turntrace/{trace_id}/retry/",
        "glossary list": admin + "/retrieval/glossaryentry/",
        "glossary form": admin + "/retrieval/glossaryentry/add/",
        "user form": admin + f"/auth/user/{user_id}/change/",
    }
    for name, url in pages.items():
        if found := seen.open(url):
            refused[name] = found
        if name == "document list":
            # actions.js ran: ticking every row updates the "n of m selected" counter.
            page.locator("#action-toggle").check()
            expect(page.locator(".action-counter")).to_have_text(re.compile(r"^[1-9]\d* "))
        if name == "timeline":
            expect(page.locator("svg.review-bar rect").first).to_be_attached()
            page.screenshot(path=str(SCREENSHOTS / "admin-timeline-under-csp.png"))
        if name == "user form":
            # SelectFilter2.js ran: the groups field became the two-box selector.
            expect(page.locator("#id_groups_from")).to_be_attached()
    assert refused == {}
