"""The staff playground: one question through two retrieval configurations, side by side.

It searches as the staff member (their own scope: a document they may not read is never
retrieved, as in their own chat), stores nothing, and is posted so that the question stays
out of URLs and access logs. Needs the `quality.use_playground` permission.
"""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from conversations.quality.datasets import EvaluationInputError, history_parse
from conversations.quality.playground import PlaygroundConfig, playground_run
from retrieval.admin.base import admin_page
from retrieval.pipeline.retrieve import REWRITE_MODES, RewriteMode
from retrieval.pipeline.search import Legs
from retrieval.pipeline.types import HistoryMessage

PERMISSION = "quality.use_playground"
LEGS: tuple[Legs, ...] = ("hybrid", "vector", "text")
_REWRITES = [(m, m) for m in REWRITE_MODES]
_LEGS = [(leg, leg) for leg in LEGS]


def may_use_playground(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.has_perm(PERMISSION))


def history_from_text(text: str) -> tuple[HistoryMessage, ...]:
    """JSON in the tasks' history format, or one message a line (user first, alternating)."""
    stripped = text.strip()
    if not stripped:
        return ()
    if stripped[0] in "[{":
        return history_parse(stripped, where=_("history"))
    lines = [line.strip() for line in stripped.splitlines() if line.strip()]
    return history_parse(json.dumps(lines), where=_("history"))


class PlaygroundForm(forms.Form):
    question = forms.CharField(
        label=gettext_lazy("Question"),
        max_length=settings.CHATRAG_MAX_MESSAGE_CHARS,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
    )
    history = forms.CharField(
        label=gettext_lazy("Conversation before it"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text=gettext_lazy(
            "Optional. One message a line, the user's first, alternating; or JSON: a list of "
            '{"role", "text"} as in an evaluation task.'
        ),
    )
    rewrite_a = forms.ChoiceField(
        label=gettext_lazy("A: rewrite"), choices=_REWRITES, initial="rules"
    )
    legs_a = forms.ChoiceField(label=gettext_lazy("A: search"), choices=_LEGS, initial="hybrid")
    hyde_a = forms.BooleanField(label=gettext_lazy("A: HyDE (needs a model)"), required=False)
    rerank_a = forms.BooleanField(label=gettext_lazy("A: rerank (needs a model)"), required=False)
    rewrite_b = forms.ChoiceField(
        label=gettext_lazy("B: rewrite"), choices=_REWRITES, initial="none"
    )
    legs_b = forms.ChoiceField(label=gettext_lazy("B: search"), choices=_LEGS, initial="hybrid")
    hyde_b = forms.BooleanField(label=gettext_lazy("B: HyDE (needs a model)"), required=False)
    rerank_b = forms.BooleanField(label=gettext_lazy("B: rerank (needs a model)"), required=False)

    def clean_history(self) -> tuple[HistoryMessage, ...]:
        try:
            return history_from_text(self.cleaned_data.get("history") or "")
        except EvaluationInputError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def configs(self) -> list[PlaygroundConfig]:
        data = self.cleaned_data
        return [
            PlaygroundConfig(
                rewrite=cast(RewriteMode, data[f"rewrite_{side}"]),
                legs=cast(Legs, data[f"legs_{side}"]),
                hyde=bool(data.get(f"hyde_{side}")),
                rerank=bool(data.get(f"rerank_{side}")),
            )
            for side in ("a", "b")
        ]


def playground_view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """The form, and after a post the two runs side by side."""
    if not may_use_playground(request):
        raise PermissionDenied
    staff = request.user
    assert isinstance(staff, User)
    runs: list[dict[str, Any]] = []
    form = PlaygroundForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        runs = [
            {"label": run.config.label, **run.to_dict()}
            for run in playground_run(
                question=form.cleaned_data["question"],
                history=form.cleaned_data["history"],
                reader=staff,  # their own scope: never a document they could not read
                configs=form.configs(),
            )
        ]
    context = {"title": _("Retrieval playground"), "form": form, "runs": runs}
    return admin_page(model_admin, request, "admin/quality/evaluationrun/playground.html", context)
