"""The promotion gate in the admin: each gate run's report as tables, and the promotion.

Gate runs are made by `manage.py gate`; staff with the view permission read them, and staff
with `quality.promote_policy` may promote a run's candidate, only when the gate passed
against the policy the chat runs now (`conversations.quality.promotion`). The report holds
task and turn ids and numbers only: no question, query or document, so it is shown whole.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from conversations.quality.models import GateRun, PolicyPromotion
from conversations.quality.promotion import (
    PERMISSION,
    PromotionRefused,
    gate_candidate,
    policy_promote,
    policy_running,
    promotion_pending,
    promotion_refusal,
)
from retrieval.admin.base import ListFilterLookupsOnly, NoAddOrChangeMixin, ObjectContextAdmin

_METRICS = ("recall@5", "recall@10", "mrr@10", "ndcg@10")
_KINDS = (
    ("overall", gettext_lazy("Overall")),
    ("category", gettext_lazy("By category")),
    ("language", gettext_lazy("By language")),
    ("length", gettext_lazy("By question length (short ≤ 4 words, long ≥ 10)")),
)


def may_promote(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.has_perm(PERMISSION))


def report_tables(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's groups as one table per kind, each row's cells current → candidate."""
    metric = (report.get("config") or {}).get("metric", "mrr@10")
    tables = []
    for kind, title in _KINDS:
        rows = [
            {
                "group": row["group"],
                "n": row["n"],
                "cells": [
                    (row["current"][m], row["candidate"][m], row["delta"][m]) for m in _METRICS
                ],
                "delta": row["delta"][metric],
                "worse": row["worse"],
                "better": row["better"],
            }
            for row in report.get("groups", [])
            if row["kind"] == kind
        ]
        if rows:
            tables.append({"title": title, "rows": rows})
    return tables


@admin.register(GateRun)
class GateRunAdmin(NoAddOrChangeMixin, ListFilterLookupsOnly, ObjectContextAdmin[GateRun]):
    """Gate runs (made by `manage.py gate`): the report, and "promote" when it passed."""

    list_display = [
        "id",
        "candidate_policy",
        "current_policy",
        "source_label",
        "verdict",
        "headline",
        "real_turns",
        "created_at",
    ]
    list_filter = ["passed", "source", "candidate_mode", "created_at"]
    fields = (
        "candidate_policy",
        "current_policy",
        "source",
        "source_label",
        "real_turns",
        "passed",
        "created_by",
        "created_at",
    )
    readonly_fields = fields
    change_form_template = "admin/quality/gaterun/report.html"

    @admin.display(description=gettext_lazy("verdict"), boolean=True, ordering="passed")
    def verdict(self, obj: GateRun) -> bool:
        return obj.passed

    @admin.display(description=gettext_lazy("primary metric"))
    def headline(self, obj: GateRun) -> str:
        report = obj.report or {}
        metric = (report.get("config") or {}).get("metric", "")
        groups = report.get("groups") or []
        if not groups or not metric:
            return "–"
        row = groups[0]
        return (
            f"{metric} {row['current'][metric]:.3f} → {row['candidate'][metric]:.3f} "
            f"(Δ {row['delta'][metric]:+.3f})"
        )

    def get_urls(self) -> list[URLPattern]:
        promote = path(
            "<int:object_id>/promote/",
            self.admin_site.admin_view(require_POST(self.promote_view)),
            name="quality_gaterun_promote",
        )
        return [promote, *super().get_urls()]

    def promote_view(self, request: HttpRequest, object_id: int) -> HttpResponseRedirect:
        """Record the promotion of this run's candidate (POST; the promote permission)."""
        if not (self.has_view_permission(request) and may_promote(request)):
            raise PermissionDenied
        gate = get_object_or_404(GateRun, pk=object_id)
        user = request.user
        assert isinstance(user, User)
        try:
            promotion = policy_promote(gate=gate, user=user)
        except PromotionRefused as exc:
            messages.error(request, _("Not promoted: %(reason)s.") % {"reason": exc})
        else:
            messages.success(
                request,
                _("Promoted %(policy)s. Deploy it with: %(setting)s")
                % {"policy": promotion.to_policy, "setting": promotion.setting},
            )
        return HttpResponseRedirect(reverse("admin:quality_gaterun_change", args=[gate.pk]))

    def change_context(self, request: HttpRequest, obj: GateRun) -> dict[str, Any]:
        report = obj.report or {}
        refusal = promotion_refusal(gate=obj)
        return {
            "gate": obj,
            "report": report,
            "tables": report_tables(report),
            "metrics": _METRICS,
            "sides": [report.get("current") or {}, report.get("candidate") or {}],
            "refusal": refusal,
            "can_promote": may_promote(request) and refusal is None,
            "may_promote": may_promote(request),
            "setting": gate_candidate(obj).setting(),
            "running": policy_running().version,
            "promotions": list(obj.promotions.select_related("promoted_by")),
            "pending": promotion_pending(),
        }


@admin.register(PolicyPromotion)
class PolicyPromotionAdmin(NoAddOrChangeMixin, ListFilterLookupsOnly, admin.ModelAdmin[Any]):
    """Who promoted which rewrite policy over which, on which gate run, and its setting."""

    list_display = ["promoted_at", "from_policy", "to_policy", "setting", "promoted_by", "gate"]
    list_filter = ["to_mode", "promoted_at"]
    fields = ("gate", "from_policy", "to_policy", "setting", "promoted_by", "promoted_at")
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record of a decision
