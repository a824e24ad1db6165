"""Retrieval quality in the admin: evaluation cases, runs with progress, the chart over time
(and beside it the rewrites' fidelity as staff judged it, `conversations.quality.fidelity`)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, ManyToManyField, QuerySet
from django.forms import ModelMultipleChoiceField
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from conversations.quality.admin.filters import search_terms
from conversations.quality.admin.forms import EvaluationRunForm
from conversations.quality.admin.playground import may_use_playground, playground_view
from conversations.quality.cases import eval_case_records
from conversations.quality.datasets import EvaluationInputError
from conversations.quality.fidelity import fidelity_pending_count, fidelity_report
from conversations.quality.models import EvalCase, EvaluationRun
from conversations.quality.runs import (
    evaluation_run_again,
    evaluation_run_create,
    run_comparison,
    run_history,
    run_metrics,
)
from retrieval.access import (
    RESTRICTED_PASSAGE,
    DocumentAccess,
    document_access,
    documents_readable,
    titles_scrubbed,
)
from retrieval.admin.base import ListFilterLookupsOnly, ObjectContextAdmin, admin_page, request_user
from retrieval.admin.progress import ProgressMixin
from retrieval.models import Document
from retrieval.services import default_collection


@admin.register(EvalCase)
class EvalCaseAdmin(ListFilterLookupsOnly, admin.ModelAdmin[EvalCase]):
    list_display = [
        "question_listed",
        "category",
        "relevant_count",
        "expect_clarification",
        "active",
        "source",
        "created_by",
        "created_at",
    ]
    list_filter = ["category", "active", "collection", "expect_clarification", "created_at"]
    search_fields = ["question", "note", "relevant_documents__external_id"]
    filter_horizontal = ["relevant_documents"]
    fields = [
        "collection",
        "question",
        "history",
        "relevant_documents",
        "category",
        "expect_clarification",
        "language",
        "note",
        "active",
        "source_message",
        "created_by",
        "created_at",
    ]
    readonly_fields = ["source_message", "created_by", "created_at"]
    actions = ["activate", "deactivate"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[EvalCase]:
        return super().get_queryset(request).annotate(n_relevant=Count("relevant_documents"))

    # A case's history may hold answers written from documents this staff member may not
    # read (a member of the group marked it): as on the turn's own pages, its answers are
    # placeholders and those documents' titles are replaced, in the history and the
    # question, which are then read-only (a save must not store the placeholders).

    def get_fields(self, request: HttpRequest, obj: EvalCase | None = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if obj is None or _hidden_titles(request, obj) is None:
            return fields
        shown = {"history": "history_shown", "question": "question_shown"}
        return [shown.get(f, f) if isinstance(f, str) else f for f in fields]

    def get_readonly_fields(self, request: HttpRequest, obj: EvalCase | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and _hidden_titles(request, obj) is not None:
            fields += ["history_shown", "question_shown"]
        return fields

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return EvalCaseChangeList

    @admin.display(description=gettext_lazy("question"))
    def question_shown(self, obj: EvalCase) -> str:
        return titles_scrubbed(obj.question, getattr(obj, "hidden_titles", None) or ())

    @admin.display(description=gettext_lazy("history"))
    def history_shown(self, obj: EvalCase) -> str:
        titles = getattr(obj, "hidden_titles", None) or ()
        return json.dumps(
            [
                {
                    "role": m.get("role"),
                    "text": titles_scrubbed(str(m.get("text", "")), titles)
                    if m.get("role") == "user"
                    else str(RESTRICTED_PASSAGE),
                }
                for m in obj.history
                if isinstance(m, dict)
            ],
            ensure_ascii=False,
        )

    @admin.display(description=gettext_lazy("question"), ordering="question")
    def question_listed(self, obj: EvalCase) -> str:
        # Set by EvalCaseChangeList; nothing outside it.
        return str(getattr(obj, "question_listed_text", ""))

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        # Searching by document id would tell who may not read them which ids exist.
        fields = list(super().get_search_fields(request))
        if request.user.is_superuser:
            return fields
        return [f for f in fields if not f.startswith("relevant_documents")]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[EvalCase], search_term: str
    ) -> tuple[QuerySet[EvalCase], bool]:
        """Match a case's question only as the list shows it (issue 38, finding 4): a
        question that repeats a title the viewer may not read (a clicked option) is listed
        with the placeholder, so `?q=<the title>` must not find it either."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        terms = search_terms(search_term)
        if not terms or request.user.is_superuser:
            return found, duplicates
        keep = []
        for pk, question, note, documents in found.values_list(
            "pk", "question", "note", "history_documents"
        ):
            titles = _titles_unreadable(request, list(documents or [])) or ()
            texts = (titles_scrubbed(question, titles).casefold(), (note or "").casefold())
            if all(any(t in text for text in texts) for t in terms):
                keep.append(pk)
        return found.filter(pk__in=keep), duplicates

    def formfield_for_manytomany(
        self, db_field: ManyToManyField[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> ModelMultipleChoiceField | None:
        # Only documents the staff member may read are listed (a document's label is its title).
        if db_field.name == "relevant_documents":
            kwargs["queryset"] = documents_readable(user=request.user).order_by("external_id")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # Right documents this staff member may not see stay on the case: not listed is not
        # unmarked.
        case = form.instance
        kept = (
            list(case.relevant_documents.exclude(pk__in=documents_readable(user=request.user)))
            if change
            else []
        )
        super().save_related(request, form, formsets, change)
        if kept:
            case.relevant_documents.add(*kept)

    @admin.display(description=gettext_lazy("right documents"), ordering="n_relevant")
    def relevant_count(self, obj: EvalCase) -> int:
        return int(getattr(obj, "n_relevant", 0))

    @admin.display(description=gettext_lazy("from"))
    def source(self, obj: EvalCase) -> str:
        if obj.source_message_id is None:
            return "–"
        trace = getattr(obj.source_message, "trace", None) if obj.source_message else None
        if trace is None:
            return str(obj.source_message_id)
        url = reverse("admin:conversations_turntrace_change", args=[trace.pk])
        return format_html('<a href="{}">{}</a>', url, _("turn %(id)s") % {"id": trace.pk})

    def save_model(self, request: HttpRequest, obj: EvalCase, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request_user(request)
        super().save_model(request, obj, form, change)

    @admin.action(
        description=gettext_lazy("Use selected cases in evaluations"), permissions=["change"]
    )
    def activate(self, request: HttpRequest, queryset: QuerySet[EvalCase]) -> None:
        self.message_user(
            request, _("%(count)d cases on.") % {"count": queryset.update(active=True)}
        )

    @admin.action(
        description=gettext_lazy("Leave selected cases out of evaluations"), permissions=["change"]
    )
    def deactivate(self, request: HttpRequest, queryset: QuerySet[EvalCase]) -> None:
        count = queryset.update(active=False)
        self.message_user(request, _("%(count)d cases off.") % {"count": count})


def _hidden_titles(request: HttpRequest, case: EvalCase) -> frozenset[str] | None:
    """The titles to hide from this viewer in the case's history and question, or None when
    they may read every document the history was written from. Kept on the case, which is
    the instance the change form renders."""
    # An attribute of this page's instance only (setattr: the model does not declare it).
    if not hasattr(case, "hidden_titles"):
        titles = _titles_unreadable(request, case.history_documents or [])
        setattr(case, "hidden_titles", titles)  # noqa: B010
    hidden: frozenset[str] | None = getattr(case, "hidden_titles")  # noqa: B009
    return hidden


def _titles_unreadable(request: HttpRequest, ids: list[Any]) -> frozenset[str] | None:
    if not ids:
        return None
    access = document_access(user=request.user, collection=default_collection(), document_ids=ids)
    unreadable = [i for i in ids if not access.can_read(document_id=i)]
    if not unreadable:
        return None
    return frozenset(Document.objects.filter(pk__in=unreadable).values_list("title", flat=True))


class EvalCaseChangeList(ChangeList):
    """The list's questions, their unreadable titles replaced as on the case's page."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        for case in self.result_list:
            titles = _hidden_titles(request, case) or ()
            case.question_listed_text = titles_scrubbed(case.question, titles)


def _metric(request: HttpRequest, run: EvaluationRun | None) -> str:
    wanted = request.GET.get("metric", "mrr@10")
    allowed = run_metrics(run) if run is not None else ["mrr@10", "ndcg@10"]
    if run is None and wanted.startswith("recall@"):
        allowed.append(wanted)
    return wanted if wanted in allowed else "mrr@10"


@admin.register(EvaluationRun)
class EvaluationRunAdmin(ListFilterLookupsOnly, ProgressMixin, ObjectContextAdmin[EvaluationRun]):
    """Start evaluations, watch them run, compare modes and follow quality over time."""

    list_display = [
        "id",
        "source_label",
        "status",
        "progress",
        "mode_list",
        "headline",
        "created_by",
        "created_at",
    ]
    list_filter = ["status", "source", "collection", "created_at"]
    fields = (
        "collection",
        "source",
        "source_label",
        "modes",
        "ks",
        "status",
        "created_by",
        "created_at",
        "started_at",
        "finished_at",
    )
    readonly_fields = fields
    change_form_template = "admin/quality/evaluationrun/report.html"
    change_list_template = "admin/quality/evaluationrun/change_list.html"

    @admin.display(description=gettext_lazy("progress"))
    def progress(self, obj: EvaluationRun) -> str:
        return format_html("{} / {}", obj.done, obj.total)

    @admin.display(description=gettext_lazy("modes"))
    def mode_list(self, obj: EvaluationRun) -> str:
        return ", ".join(obj.modes)

    @admin.display(description=gettext_lazy("MRR@10 per mode"))
    def headline(self, obj: EvaluationRun) -> str:
        modes = (obj.report or {}).get("modes") or {}
        return " · ".join(
            f"{mode} {summary['overall'].get('mrr@10', 0):.3f}" for mode, summary in modes.items()
        )

    actions = ["run_again"]

    def get_urls(self) -> list[URLPattern]:
        playground = path(
            "playground/",
            self.admin_site.admin_view(lambda request: playground_view(self, request)),
            name="quality_evaluationrun_playground",
        )
        return [playground, *self.progress_urls(), *super().get_urls()]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a run is a record; start a new one instead

    @admin.action(description=gettext_lazy("Run selected evaluations again"), permissions=["add"])
    def run_again(self, request: HttpRequest, queryset: QuerySet[EvaluationRun]) -> None:
        started = 0
        for run in queryset.select_related("collection"):
            try:
                evaluation_run_again(run=run, user=request_user(request))
                started += 1
            except EvaluationInputError as exc:
                self.message_user(request, f"#{run.pk}: {exc}", messages.WARNING)
        self.message_user(request, _("%(count)d evaluations queued.") % {"count": started})

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        metric = _metric(request, None)
        context = {**(extra_context or {}), "chart": run_history(None, metric=metric)}
        context["metrics"] = ["mrr@10", "ndcg@10", "recall@5", "recall@10"]
        context["metric"] = metric
        context["can_playground"] = may_use_playground(request)
        context["can_gate"] = request.user.has_perm("quality.view_gaterun")
        # The rewrites' fidelity beside the runs: aggregates, for staff who may read the
        # fidelity reviews.
        if request.user.has_perm("quality.view_rewritefidelity"):
            context["fidelity"] = fidelity_report()
            context["fidelity_pending"] = fidelity_pending_count()
        # The chart's own parameter, not a filter of the list (the list took it for a lookup
        # and answered "?e=1"; it may filter only through its list filters).
        params = request.GET.copy()
        params.pop("metric", None)
        request.GET = params  # type: ignore[assignment]  # stubs: GET is immutable, ours is not
        return super().changelist_view(request, context)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Start a run on the marked cases or on an uploaded tasks file."""
        if not self.has_add_permission(request):
            return super().add_view(request, form_url, extra_context)  # the usual 403
        if request.method == "POST":
            form = EvaluationRunForm(request.POST, request.FILES)
            if form.is_valid():
                data = form.cleaned_data
                collection = data["collection"]
                if data["source"] == EvaluationRun.Source.FILE:
                    records, label = data["records"], data["label"]
                else:
                    records, label = eval_case_records(collection=collection), "cases"
                try:
                    run = evaluation_run_create(
                        collection=collection,
                        source=data["source"],
                        source_label=label,
                        tasks=records,
                        modes=data["modes"],
                        ks=data["ks"],
                        user=request_user(request),
                    )
                except EvaluationInputError as exc:
                    form.add_error(None, str(exc))
                else:
                    messages.success(request, _("Evaluation queued."))
                    return HttpResponseRedirect(
                        reverse("admin:quality_evaluationrun_change", args=[run.pk])
                    )
        else:
            form = EvaluationRunForm()
        context = {
            "title": _("Run an evaluation"),
            "form": form,
            "cases": EvalCase.objects.filter(active=True).count(),
        }
        return admin_page(
            self, request, "admin/quality/evaluationrun/start.html", context, extra_context
        )

    def change_context(self, request: HttpRequest, run: EvaluationRun) -> dict[str, Any]:
        metric = _metric(request, run)
        questions = {
            str(t.get("id", n)): str(t.get("question", ""))
            for n, t in enumerate(run.tasks, start=1)
        }
        rows = (run.report or {}).get("rows") or []
        return {
            "run": run,
            "running": run.status in {EvaluationRun.Status.QUEUED, EvaluationRun.Status.RUNNING},
            "progress_url": reverse("admin:quality_evaluationrun_progress", args=[run.pk]),
            "comparison": run_comparison(run),
            "chart": run_history(run, metric=metric),
            "metrics": run_metrics(run),
            "metric": metric,
            "task_rows": _task_rows(
                rows, questions, run.modes, access=_run_access(request, run, rows)
            ),
        }


def _run_access(
    request: HttpRequest, run: EvaluationRun, rows: list[dict[str, Any]]
) -> DocumentAccess:
    """Which of the run's documents this staff member may read (their ids name them)."""
    ids = {d for row in rows for d in [*row.get("relevant", []), *(row.get("ranked") or [])[:1]]}
    return document_access(user=request.user, collection=run.collection, external_ids=ids)


def _task_rows(
    rows: list[dict[str, Any]],
    questions: dict[str, str],
    modes: list[str],
    *,
    access: DocumentAccess,
) -> list[dict[str, Any]]:
    """Per task: the question and MRR@10 and the first document per mode, worst first.

    Documents the viewer may not read are shown as placeholders.
    """
    by_task: dict[str, dict[str, Any]] = {}
    for row in rows:
        task = by_task.setdefault(
            row["id"],
            {
                "id": row["id"],
                "category": row.get("category", ""),
                "question": questions.get(row["id"], ""),
                "relevant": [access.external_id(d) for d in row.get("relevant", [])],
                "modes": {},
            },
        )
        task["modes"][row["mode"]] = {
            "mrr": row.get("mrr@10", 0.0),
            "first": access.external_id(row["ranked"][0]) if row.get("ranked") else "–",
            "clarified": row.get("clarified", False),
        }
    tasks = list(by_task.values())
    for task in tasks:
        task["cells"] = [task["modes"].get(m) for m in modes]
        task["best"] = max((c["mrr"] for c in task["cells"] if c), default=0.0)
    tasks.sort(key=lambda t: (t["best"], t["id"]))
    return tasks[:300]
