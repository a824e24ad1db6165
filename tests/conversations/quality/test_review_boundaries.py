"""Staff review pages cannot be used to read raw data or change state without the right
(issue 14, findings 2 and 7).

The attacks: a staff user with view rights ran `/admin/conversations/conversation/?title__regex=…`
one character at a time and extracted a CPF from a conversation title in 100 requests (the
same on `feedback/?reason__regex=…`), unlogged; and marked turns reviewed or reopened them
with view rights only.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Feedback, StaffAccessLog, TurnTrace
from tests.conversations.quality.test_review import CPF, make_turn

pytestmark = pytest.mark.django_db

CHANGELISTS = {
    "conversation": "/admin/conversations/conversation/",
    "feedback": "/admin/conversations/feedback/",
    "turntrace": "/admin/conversations/turntrace/",
    "attentionturn": "/admin/conversations/attentionturn/",
}


@pytest.fixture
def viewer(db: None) -> User:
    """Staff with view rights on every review model, and nothing else."""
    user = User.objects.create_user("vera", password="pw-vera-123", is_staff=True)
    codenames = ["view_conversation", "view_turntrace", "view_attentionturn", "view_feedback"]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def leaky(personas: dict[str, Any]) -> Conversation:
    """A conversation whose raw title and feedback reason hold a CPF."""
    turn = make_turn(personas["ana"], f"meu CPF é {CPF}, e o VR?", thumbs=-1)
    Conversation.objects.filter(pk=turn.conversation.pk).update(title=f"CPF {CPF}")
    Feedback.objects.filter(message__conversation=turn.conversation).update(
        reason=f"errou meu CPF {CPF}"
    )
    return turn.conversation


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("page", "lookup"),
    [
        ("conversation", "title__regex"),
        ("conversation", "title__startswith"),
        ("conversation", "title__gt"),
        ("conversation", "messages__text__regex"),
        ("feedback", "reason__regex"),
        ("feedback", "reason__icontains"),
        ("turntrace", "message__text__regex"),
        ("attentionturn", "masked_window__icontains"),
    ],
)
def test_free_lookups_on_raw_text_are_refused(
    viewer: User, leaky: Conversation, page: str, lookup: str
) -> None:
    client = _client(viewer)
    # The attack's first probe: a prefix that matches the CPF's first digit.
    response = client.get(CHANGELISTS[page], {lookup: "5" if "regex" not in lookup else "^CPF 5"})
    assert response.status_code == 400
    assert CPF not in response.content.decode()


def test_the_list_filters_still_work_and_each_list_page_is_logged(
    viewer: User, leaky: Conversation
) -> None:
    client = _client(viewer)
    for page, url in CHANGELISTS.items():
        response = client.get(url, {"created_at__gte": "2000-01-01 00:00:00+00:00"})
        assert response.status_code == 200, page
        assert CPF not in response.content.decode()
    logged = list(StaffAccessLog.objects.filter(username="vera").values_list("view", "path"))
    assert len(logged) == len(CHANGELISTS)
    assert all("created_at__gte=2000-01-01" in path for _, path in logged)


def test_view_only_staff_cannot_mark_turns_reviewed_or_reopen_them(
    viewer: User, leaky: Conversation
) -> None:
    client = _client(viewer)
    trace = TurnTrace.objects.get(message__conversation=leaky)
    url = f"/admin/conversations/turntrace/{trace.pk}/reviewed/"
    assert client.post(url).status_code == 403
    assert client.post(url, {"open": "1"}).status_code == 403
    # Nor through the panel's bulk actions: they are not offered, and a forged post does nothing.
    panel = CHANGELISTS["attentionturn"]
    assert "mark_reviewed" not in client.get(panel).content.decode()
    client.post(panel + "?review=all", {"action": "mark_reviewed", "_selected_action": [trace.pk]})
    trace.refresh_from_db()
    assert trace.reviewed_at is None


def test_staff_with_the_change_permission_can_review(viewer: User, leaky: Conversation) -> None:
    viewer.user_permissions.add(Permission.objects.get(codename="change_turntrace"))
    client = _client(viewer)
    trace = TurnTrace.objects.get(message__conversation=leaky)
    assert client.post(f"/admin/conversations/turntrace/{trace.pk}/reviewed/").status_code == 302
    trace.refresh_from_db()
    assert trace.reviewed_at is not None
    client.post(
        CHANGELISTS["attentionturn"] + "?review=reviewed",
        {"action": "mark_open", "_selected_action": [trace.pk]},
    )
    trace.refresh_from_db()
    assert trace.reviewed_at is None


def test_a_list_search_is_logged_with_its_personal_data_masked(
    viewer: User, leaky: Conversation
) -> None:
    """The second attack: a staff search for a CPF stayed in the access log as typed."""
    client = _client(viewer)
    digits = CPF.replace(".", "").replace("-", "")
    for term in (CPF, digits):
        response = client.get(CHANGELISTS["conversation"], {"q": term, "o": "1"})
        assert response.status_code == 200
    paths = list(StaffAccessLog.objects.filter(username="vera").values_list("path", flat=True))
    assert len(paths) == 2
    for path in paths:
        assert CPF not in path and digits not in path and "%2E" not in path, path
        assert "CPF_1" in path and "o=1" in path


# Admin actions that change nothing anyone can see; every other action changes state and
# must ask for more than the view permission (issue 14, point 7).
READ_ONLY_ACTIONS = {
    ("retrieval", "glossaryentry", "export_selected"),  # a download
    # django-axes' own: deletes only expired attempts, which axes itself deletes at every
    # login ("Cleaned up 0 expired access attempts"); they no longer count for a lockout.
    ("axes", "accessattempt", "cleanup_expired_attempts"),
}


def test_every_admin_action_that_changes_state_asks_for_a_change_permission() -> None:
    from django.contrib import admin

    lax = []
    for model, model_admin in admin.site._registry.items():
        for action in model_admin.actions or []:
            func = getattr(model_admin, action) if isinstance(action, str) else action
            name = func.__name__
            if (model._meta.app_label, model._meta.model_name, name) in READ_ONLY_ACTIONS:
                continue
            asked = set(getattr(func, "allowed_permissions", ()))
            if not asked - {"view"}:
                lax.append(f"{model._meta.label}.{name}")
    assert lax == []


def test_view_only_staff_cannot_switch_evaluation_cases_off(db: None) -> None:
    from conversations.quality.models import EvalCase
    from retrieval.services import default_collection

    case = EvalCase.objects.create(collection=default_collection(), question="regra do VR")
    user = User.objects.create_user("eve", password="pw-eve-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_evalcase"))
    client = _client(user)
    url = reverse("admin:quality_evalcase_changelist")
    assert client.get(url).status_code == 200
    client.post(url, {"action": "deactivate", "_selected_action": [case.pk]})
    case.refresh_from_db()
    assert case.active


@pytest.mark.parametrize("value", ["zzz", "\x00", "REASON", "no_results'--"])
def test_a_reason_the_panel_does_not_offer_filters_nothing_instead_of_failing(
    viewer: User, leaky: Conversation, value: str
) -> None:
    """A second attack: `attentionturn/?reason=zzz` was a server error (500) for any staff
    member with view rights; the other flag filters ignore a value they do not offer."""
    client = _client(viewer)
    response = client.get(CHANGELISTS["attentionturn"], {"reason": value, "review": "all"})
    assert response.status_code == 200
    # The one turn of the panel is still listed: the unknown reason filtered nothing.
    trace = TurnTrace.objects.get(message__conversation=leaky)
    assert f"/admin/conversations/turntrace/{trace.pk}/" in response.content.decode()
