"""The promotion gate's admin pages: the report as tables, and promotion only when the gate
passed against the running policy, for staff with the promote permission."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from conversations.quality.gate import GateConfig, TaskResult, gate_report
from conversations.quality.models import GateRun, PolicyPromotion
from conversations.quality.promotion import Policy, gate_run_record, policy_running
from retrieval.pipeline.rewrite_llm import llm_policy
from retrieval.pipeline.rewrite_rules import POLICY_VERSION
from tests.conversations.test_admin_csp import inline_code

pytestmark = pytest.mark.django_db

CONFIG = GateConfig(metric="mrr@10", margin=0.05, latency_budget_ms=500, degradation_ceiling=0.2)
CANDIDATE = Policy("llm", "bigger-model")


def _task(id: str, mrr: float, category: str, words: int = 6) -> TaskResult:
    return TaskResult(
        id=id,
        category=category,
        language="pt",
        words=words,
        relevant=frozenset({"doc"}),
        metrics={"recall@5": float(mrr > 0), "recall@10": 1.0, "mrr@10": mrr, "ndcg@10": mrr},
        sources=("doc",),
        rewrite_ms=12.0,
        total_ms=80.0,
    )


def _gate(*, wins: bool, current: Policy | None = None) -> GateRun:
    current = current or policy_running()
    before = [_task("t1", 0.5, "follow-up"), _task("t2", 1.0, "standalone", words=2)]
    after = [_task("t1", 1.0, "follow-up"), _task("t2", 1.0, "standalone", words=2)]
    if not wins:
        before, after = after, before
    report = gate_report(
        current_policy=current.version,
        candidate_policy=CANDIDATE.version,
        current=before,
        candidate=after,
        config=CONFIG,
    )
    return gate_run_record(
        current=current,
        candidate=CANDIDATE,
        source=GateRun.Source.FILE,
        source_label="tasks.jsonl",
        real_turns=0,
        report=report.to_dict(),
        passed=report.passed,
    )


def _staff(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password=f"pw-{name}-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _page(client: Client, gate: GateRun) -> Any:
    return client.get(reverse("admin:quality_gaterun_change", args=[gate.pk]))


def _promote(client: Client, gate: GateRun) -> Any:
    return client.post(reverse("admin:quality_gaterun_promote", args=[gate.pk]), follow=True)


def test_the_report_shows_as_tables_and_a_passing_gate_offers_promotion() -> None:
    gate = _gate(wins=True)
    assert gate.passed and gate.current_policy == POLICY_VERSION
    promoter = _client(_staff("paula", "view_gaterun", "promote_policy"))
    page = _page(promoter, gate)
    assert page.status_code == 200
    html = page.content.decode()
    for heading in ("By category", "By language", "By question length"):
        assert heading in html
    assert "follow-up" in html and "standalone" in html and "short" in html
    assert "0.750" in html and "1.000" in html  # overall MRR@10, current and candidate
    assert "answer-fact recall" in html and "source coverage (multi-topic)" in html
    assert "rewrite p50 / p95 (ms)" in html and "model calls" in html
    assert "margin" in html and "latency" in html and "degradation" in html
    assert "Promote the candidate" in html
    assert "Tasks the candidate changed" in html and "<td>t1</td>" in html
    assert "CHATRAG_REWRITE_MODE=llm CHATRAG_LLM_MODEL=bigger-model" in html
    assert inline_code(html) == []  # the admin's Content-Security-Policy holds

    # The list shows the verdict and the headline metric.
    listing = promoter.get(reverse("admin:quality_gaterun_changelist")).content.decode()
    assert "mrr@10 0.750 → 1.000 (Δ +0.250)" in listing

    response = _promote(promoter, gate)
    assert response.status_code == 200
    promotion = PolicyPromotion.objects.get()
    assert (promotion.from_policy, promotion.to_policy) == (
        POLICY_VERSION,
        llm_policy("bigger-model"),
    )
    assert promotion.setting == "CHATRAG_REWRITE_MODE=llm CHATRAG_LLM_MODEL=bigger-model"
    assert promotion.promoted_by is not None and promotion.promoted_by.username == "paula"
    assert promotion.gate_id == gate.pk
    html = response.content.decode()
    assert "Promoted llm/bigger-model/prompt-" in html
    # Recorded, not deployed: the chat runs the environment's policy until the setting changes.
    assert policy_running() == Policy("rules")
    assert "Promoted but not deployed yet" in html


def test_a_failing_gate_offers_no_promotion_and_refuses_one() -> None:
    gate = _gate(wins=False)
    assert not gate.passed
    promoter = _client(_staff("paula", "view_gaterun", "promote_policy"))
    html = _page(promoter, gate).content.decode()
    assert "Promote the candidate" not in html
    assert (
        "Promotion not offered: the candidate did not pass the gate (margin, degradation)" in html
    )
    response = _promote(promoter, gate)
    assert "Not promoted: the candidate did not pass the gate" in response.content.decode()
    assert not PolicyPromotion.objects.exists()


def test_a_gate_against_another_policy_than_the_running_one_cannot_promote() -> None:
    # The demo's report compares rules with last-turn: the chat never ran last-turn.
    gate = _gate(wins=True, current=Policy("last-turn"))
    assert gate.passed
    promoter = _client(_staff("paula", "view_gaterun", "promote_policy"))
    html = _page(promoter, gate).content.decode()
    assert "Promote the candidate" not in html
    assert f"the gate compared against last-turn, but the chat runs {POLICY_VERSION}" in html
    _promote(promoter, gate)
    assert not PolicyPromotion.objects.exists()


def test_staff_without_the_promote_permission_see_the_report_but_cannot_promote() -> None:
    gate = _gate(wins=True)
    viewer = _client(_staff("vera", "view_gaterun"))
    page = _page(viewer, gate)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Promote the candidate" not in html and "Can promote a rewrite policy" in html
    response = viewer.post(reverse("admin:quality_gaterun_promote", args=[gate.pk]))
    assert response.status_code == 403
    assert not PolicyPromotion.objects.exists()
    # Without the view permission there is no report either, and no promotion; the
    # evaluation runs' list links the gate for those who may view it.
    gate_link = reverse("admin:quality_gaterun_changelist")
    runs = reverse("admin:quality_evaluationrun_changelist")
    reader = _client(_staff("rui", "view_gaterun", "view_evaluationrun"))
    assert gate_link in reader.get(runs).content.decode()
    outsider = _client(_staff("otto", "promote_policy", "view_evaluationrun"))
    assert gate_link not in outsider.get(runs).content.decode()
    assert _page(outsider, gate).status_code == 403
    assert (
        outsider.post(reverse("admin:quality_gaterun_promote", args=[gate.pk])).status_code == 403
    )
    assert not PolicyPromotion.objects.exists()
    # Promotion is a POST: a link cannot promote.
    promoter = _client(_staff("paula", "view_gaterun", "promote_policy"))
    assert promoter.get(reverse("admin:quality_gaterun_promote", args=[gate.pk])).status_code == 405
    assert not PolicyPromotion.objects.exists()
