"""The staff playground: one question through two configurations, within the staff member's
own document permissions.

Vera is staff with the playground permission but outside `rh-restrito`; Helena has the same
rights and is in the group. Nothing of the restricted salary table may reach Vera's page.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from tests.conftest import RESTRICTED

pytestmark = pytest.mark.django_db(transaction=True)

URL = "admin:quality_evaluationrun_playground"
SALARY_ID = "pt/faixas-salariais-2026"
SALARY_TITLE = "Tabela de faixas salariais e política de reajuste 2026"
QUESTION = "banda P3 matriz de mérito faixa salarial"


def _staff(
    name: str, *, rights: tuple[str, ...] = ("use_playground",), group: bool = False
) -> Client:
    user = User.objects.create_user(name, password=f"pw-{name}-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=rights))
    if group:
        user.groups.add(Group.objects.get(name=RESTRICTED))
    client = Client()
    client.force_login(user)
    return client


def _post(client: Client, **fields: str) -> Any:
    data = {
        "question": QUESTION,
        "history": "",
        "rewrite_a": "rules",
        "legs_a": "hybrid",
        "rewrite_b": "none",
        "legs_b": "text",
        **fields,
    }
    return client.post(reverse(URL), data)


def test_two_configurations_side_by_side(small_kb: Any) -> None:
    response = _post(_staff("helena", group=True))
    assert response.status_code == 200
    page = response.content.decode()
    assert "A: rules · hybrid" in page and "B: none · text" in page
    assert page.count('class="playground-run"') == 2
    assert "Rewrite policy" in page and "rules-" in page
    # Each query's hits with both legs' ranks, the sources and the answer, for each side.
    assert page.count("playground-hits") >= 2
    assert page.count("playground-answer") == 2
    # Helena reads the restricted table: her own scope finds it.
    assert SALARY_ID in page and SALARY_TITLE in page


def test_each_side_may_switch_the_model_stages_on(small_kb: Any) -> None:
    response = _post(_staff("helena"), rerank_a="on", hyde_b="on")
    page = response.content.decode()
    assert "A: rules · hybrid · rerank" in page and "B: none · text · hyde" in page
    # No model server in the tests: each stage says it was skipped, and why.
    assert page.count("rerank: skipped (no model server)") == 1
    assert page.count("hyde: skipped (no model server)") == 1


def test_staff_outside_the_group_never_sees_the_restricted_document(small_kb: Any) -> None:
    vera = _staff("vera")
    for legs in ("hybrid", "vector", "text"):
        response = _post(vera, legs_a=legs, rewrite_b="last-turn", legs_b=legs)
        assert response.status_code == 200
        page = response.content.decode()
        assert 'class="playground-run"' in page
        assert "vera" in page  # searched as herself
        assert SALARY_ID not in page and SALARY_TITLE not in page, legs
        assert "Estrutura de níveis e bandas" not in page


def test_history_as_lines_or_json_reaches_the_rewrite(small_kb: Any) -> None:
    client = _staff("helena", group=True)
    lines = "como funciona o reembolso de despesas?\nVocê envia as notas em até 30 dias."
    as_json = json.dumps(
        [
            {"role": "user", "text": "como funciona o reembolso de despesas?"},
            {"role": "assistant", "text": "Você envia as notas em até 30 dias."},
        ]
    )
    for history in (lines, as_json):
        response = _post(client, question="e para quem é PJ?", history=history)
        page = response.content.decode()
        assert "reembolso de despesas" in page.split('class="playground-run"', 2)[1]
        assert "contextual" in page
    response = _post(client, history='[{"role": "robot", "text": "x"}]')
    assert response.status_code == 200
    assert "bad history message" in response.content.decode()
    assert 'class="playground-run"' not in response.content.decode()


def test_the_page_needs_the_playground_permission(small_kb: Any) -> None:
    other = _staff("otto", rights=("view_evaluationrun",))
    assert other.get(reverse(URL)).status_code == 403
    assert _post(other).status_code == 403
    # Not staff at all: the admin's login page.
    outsider = Client()
    outsider.force_login(User.objects.create_user("paula", password="pw-paula-123"))
    response = outsider.get(reverse(URL))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_evaluation_list_links_to_it_only_for_those_allowed(small_kb: Any) -> None:
    changelist = reverse("admin:quality_evaluationrun_changelist")
    allowed = _staff("ines", rights=("view_evaluationrun", "use_playground"))
    assert reverse(URL) in allowed.get(changelist).content.decode()
    viewer = _staff("otto", rights=("view_evaluationrun",))
    assert reverse(URL) not in viewer.get(changelist).content.decode()
    page = allowed.get(reverse(URL))
    assert page.status_code == 200 and "csrfmiddlewaretoken" in page.content.decode()
