"""Rewrite fidelity review in the admin: the queue of sampled rewrites, and one rewrite's page
with the masked question, the window and the queries side by side and its verdict buttons.

Staff with the view permission read the queue and the pages; marking a rewrite faithful or not
needs the change permission. What came from documents the viewer may not read is a
placeholder, as on the turn's own page (`conversations.quality.review.restricted`); opening a
rewrite is recorded in the staff access log, like opening its turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from conversations.models import TurnTrace
from conversations.quality.admin.review import ReviewListMixin, RowTextMixin
from conversations.quality.fidelity import FidelityError, rewrite_fidelity_judge
from conversations.quality.models import RewriteFidelity
from conversations.quality.playground import reason_for_query
from conversations.quality.review.restricted import TurnRedactor
from conversations.quality.review.services import staff_access_record
from conversations.quality.review.timeline import TurnReview, turn_review
from conversations.trace import read_trace
from retrieval.admin.base import ObjectContextAdmin


def _staff(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # admin_view has checked it is an active staff member
    return user


class VerdictFilter(admin.SimpleListFilter):
    """Rewrites waiting for a verdict by default (those whose turn is still there)."""

    title = gettext_lazy("verdict")
    parameter_name = "verdict"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("pending", gettext_lazy("waiting")),
            ("faithful", gettext_lazy("faithful")),
            ("unfaithful", gettext_lazy("not faithful")),
            ("all", gettext_lazy("all")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or "pending"
        if value == "pending":
            return queryset.filter(verdict=value, message__isnull=False)
        if value in {"faithful", "unfaithful"}:
            return queryset.filter(verdict=value)
        return queryset

    def choices(self, changelist: Any) -> Iterator[Any]:
        current = self.value() or "pending"
        for value, label in self.lookup_choices:
            yield {
                "selected": current == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }


@dataclass
class QueryRow:
    """One query searched, as the fidelity page lists it."""

    number: int
    text: str
    type: str
    type_label: str
    weight: float | None
    reason: str


def _turn(request: HttpRequest, trace: TurnTrace) -> tuple[TurnReview, list[QueryRow], Any]:
    """The turn as this viewer may see it (the timeline's own redaction), its queries with
    why each was searched, and the redactor (for the note)."""
    question = trace.message
    redactor = TurnRedactor.for_turn(viewer=_staff(request), question=question)
    turn = turn_review(
        question=question,
        trace=trace,
        answer=None,  # the rewrite is judged against the question and its window
        feedback=[],
        owner=question.conversation.owner,
        redactor=redactor,
    )
    rewrite = read_trace(trace).rewrite
    queries = [
        QueryRow(
            number=q.number,
            text=q.text,
            type=q.type,
            type_label=q.type_label,
            weight=q.weight,
            # The reason names the carried topic: derived text.
            reason=redactor.derived(
                reason_for_query(
                    query_type=q.type,
                    reading=q.reading,
                    backend=rewrite.backend,
                    topic=rewrite.topic,
                ),
                question=question,
            ),
        )
        for q in turn.rewrite.queries
    ]
    return turn, queries, redactor


@admin.register(RewriteFidelity)
class RewriteFidelityAdmin(RowTextMixin, ReviewListMixin, ObjectContextAdmin[RewriteFidelity]):
    """The sampled rewrites; each one's page is where staff judge it."""

    list_display = ["when", "question", "policy", "verdict", "reviewer", "reviewed_at"]
    list_display_links = ["when"]
    list_filter = [VerdictFilter, "policy", "created_at"]
    date_hierarchy = "created_at"
    fields = ("policy", "verdict", "created_at", "reviewer", "reviewed_at")
    readonly_fields = fields
    change_form_template = "admin/quality/rewritefidelity/review.html"
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[RewriteFidelity]:
        return (
            super()
            .get_queryset(request)
            .select_related("message__trace", "message__conversation__owner", "reviewer")
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the turns queue them

    # The list's question, scrubbed by its own conversation's redactor (`ScrubbedChangeList`).

    def row_conversation(self, obj: Any) -> int:
        return int(obj.message.conversation_id) if obj.message is not None else 0

    def row_text(self, obj: Any) -> str:
        trace = getattr(obj.message, "trace", None) if obj.message is not None else None
        return str(trace.masked_question) if trace is not None else ""

    @admin.display(description=gettext_lazy("when"), ordering="created_at")
    def when(self, obj: RewriteFidelity) -> str:
        return f"{timezone.localtime(obj.created_at):%Y-%m-%d %H:%M}"  # the row's link

    @admin.display(description=gettext_lazy("question (masked)"))
    def question(self, obj: RewriteFidelity) -> str:
        if obj.message is None:
            return _("(conversation deleted)")
        text = str(getattr(obj, "text_shown", ""))
        return text if len(text) <= 90 else text[:89] + "…"

    def get_urls(self) -> list[URLPattern]:
        verdict = path(
            "<int:item_id>/verdict/",
            self.admin_site.admin_view(self.verdict_view),
            name="quality_rewritefidelity_verdict",
        )
        return [verdict, *super().get_urls()]

    def change_context(self, request: HttpRequest, item: RewriteFidelity) -> dict[str, Any]:
        context: dict[str, Any] = {
            "can_judge": self.has_change_permission(request, item),
            "verdict_url": reverse("admin:quality_rewritefidelity_verdict", args=[item.pk]),
        }
        trace = (
            TurnTrace.objects.select_related("message__conversation__owner")
            .filter(message_id=item.message_id)
            .first()
            if item.message_id is not None
            else None
        )
        if trace is None:
            return {**context, "gone": True, "can_judge": False}
        staff_access_record(
            user=_staff(request),
            conversation=trace.message.conversation,
            view="rewrite fidelity review",
            path=request.path,
        )
        turn, queries, redactor = _turn(request, trace)
        return {
            **context,
            "turn": turn,
            "queries": queries,
            "trace": trace,
            "can_open_turn": request.user.has_perm("conversations.view_turntrace"),
            "note_shown": redactor.scrub(item.note),
        }

    def verdict_view(self, request: HttpRequest, item_id: int) -> HttpResponse:
        """Record a verdict (POST), then go on to the next rewrite waiting for one."""
        if request.method != "POST":
            return HttpResponse(status=405, headers={"Allow": "POST"})
        item = RewriteFidelity.objects.filter(pk=item_id).first()
        if item is None:
            raise Http404("no such rewrite")
        if not self.has_change_permission(request, item):
            raise PermissionDenied
        try:
            rewrite_fidelity_judge(
                item=item,
                verdict=request.POST.get("verdict", ""),
                note=request.POST.get("note", ""),
                reviewer=_staff(request),
            )
        except FidelityError as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(
                reverse("admin:quality_rewritefidelity_change", args=[item.pk])
            )
        messages.success(request, _("Verdict recorded: %(verdict)s.") % {"verdict": item.verdict})
        following = (
            RewriteFidelity.objects.filter(
                verdict=RewriteFidelity.Verdict.PENDING, message__isnull=False
            )
            .order_by("created_at", "id")
            .first()
        )
        if following is not None:
            return HttpResponseRedirect(
                reverse("admin:quality_rewritefidelity_change", args=[following.pk])
            )
        return HttpResponseRedirect(reverse("admin:quality_rewritefidelity_changelist"))
