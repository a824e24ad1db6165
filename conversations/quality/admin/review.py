"""Admin classes of the review pages: conversations, traces, the attention panel, the log.

Thin: querysets come from `conversations.quality.review.selectors`, pages are built by
`conversations.quality.review.timeline`, and every write goes through a service. Opening a
conversation's turns is recorded in the staff access log.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from conversations.models import AttentionTurn, Conversation, Feedback, StaffAccessLog, TurnTrace
from conversations.quality.admin.filters import (
    FLAG_FILTERS,
    ReasonFilter,
    ReviewedFilter,
    RewriteCacheFilter,
    search_terms,
)
from conversations.quality.cases import eval_case_create
from conversations.quality.models import EvalCase
from conversations.quality.review.restricted import (
    TurnRedactor,
    ranking_redacted,
    redactors_by_conversation,
)
from conversations.quality.review.selectors import (
    ATTENTION_FLAGS,
    attention_traces,
    glossary_candidates_for,
    slow_threshold_ms,
    traces_annotated,
    window_documents,
)
from conversations.quality.review.services import (
    staff_access_record,
    staff_list_access_record,
    traces_mark_open,
    traces_mark_reviewed,
    turn_retry,
)
from conversations.quality.review.timeline import (
    FLAG_LABELS,
    conversation_timeline,
    display_masker,
    masked_title,
    turn_review_for_trace,
)
from conversations.trace import read_trace, turn_flags
from retrieval.access import RESTRICTED_PASSAGE, documents_readable
from retrieval.admin.base import (
    ListFilterLookupsOnly,
    NoAddOrChangeMixin,
    ObjectContextAdmin,
    admin_page,
)
from retrieval.models import Document
from retrieval.services import default_collection


def _staff(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # admin_view has checked it is an active staff member
    return user


def _record_access(request: HttpRequest, conversation: Conversation, view: str) -> None:
    staff_access_record(
        user=_staff(request), conversation=conversation, view=view, path=request.path
    )


def can_review(request: HttpRequest) -> bool:
    """Whether this staff member may change review state (view rights only read it)."""
    return bool(request.user.has_perm("conversations.change_turntrace"))


class ReviewListMixin(ListFilterLookupsOnly):
    """What every review list shares: filters only through its own list filters (never a
    free lookup on a raw text field), and each list page recorded in the access log."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response: HttpResponse = super().changelist_view(request, extra_context)  # type: ignore[misc]
        if response.status_code == 200 and isinstance(request.user, User):
            staff_list_access_record(
                user=request.user,
                view=f"{self.opts.verbose_name_plural} list",  # type: ignore[attr-defined]
                path=request.get_full_path(),
            )
        return response


class ScrubbedChangeList(ChangeList):
    """A review list whose rows show a person's text (a conversation's title, a turn's
    question) as the conversation's own pages do: a title of a document the viewer may not
    read, which a question repeats once a clarification's option is clicked, is replaced.
    Each row by its own conversation's redactor (`redactors_by_conversation`)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        owner = self.model_admin
        assert isinstance(owner, RowTextMixin)
        redactors = redactors_by_conversation(
            viewer=_staff(request), conversation_ids={owner.row_conversation(r) for r in rows}
        )
        for row in rows:
            text = owner.row_text(row)
            redactor = redactors.get(owner.row_conversation(row))
            row.text_shown = redactor.scrub(text) if redactor is not None else text


class RowTextMixin:
    """What `ScrubbedChangeList` reads of a row: its conversation and its person's text."""

    def row_conversation(self, obj: Any) -> int:
        return int(obj.message.conversation_id)

    def row_text(self, obj: Any) -> str:
        return str(obj.masked_question)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ScrubbedChangeList

    # What the search matches of a row, as paths from the list's model: the row's
    # conversation, a person's text the search reads, and the owner's username.
    search_paths: tuple[str, str, str] = (
        "message__conversation_id",
        "masked_question",
        "message__conversation__owner__username",
    )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """The admin's search, matching only text the viewer may read (issue 38, finding 4).

        The database matches the stored text; a row whose match needs a word the viewer sees
        as "[restricted document]" (a clicked option is a restricted title) is dropped, or
        the result count would spell the hidden title out word by word. Each row is checked
        against its text as its own conversation's redactor shows it.
        """
        found, duplicates = super().get_search_results(  # type: ignore[misc]
            request, queryset, search_term
        )
        terms = search_terms(search_term)
        if not terms or request.user.is_superuser or not self.get_search_fields(request):  # type: ignore[attr-defined]
            return found, duplicates
        conversation, text, username = self.search_paths
        rows = list(found.values_list("pk", conversation, text, username))
        redactors = redactors_by_conversation(
            viewer=_staff(request), conversation_ids={r[1] for r in rows}
        )
        readable: dict[Any, list[str]] = {}
        for pk, conversation_id, stored, name in rows:
            redactor = redactors.get(conversation_id)
            shown = redactor.scrub(stored or "") if redactor is not None else (stored or "")
            readable.setdefault(pk, []).extend([shown.casefold(), str(name or "").casefold()])
        keep = [
            pk
            for pk, texts in readable.items()
            if all(any(t in text for text in texts) for t in terms)
        ]
        return found.filter(pk__in=keep), duplicates


def _shown(obj: Any) -> str:
    """The row's text as `ScrubbedChangeList` left it (nothing outside such a list)."""
    return str(getattr(obj, "text_shown", ""))


def _conversation_link(conversation_id: int, label: object = None) -> str:
    url = reverse("admin:conversations_conversation_change", args=[conversation_id])
    return format_html('<a href="{}">{}</a>', url, label if label is not None else conversation_id)


def _trace_flags(trace: TurnTrace) -> list[str]:
    """A trace's flags; its feedback from the list's annotations (`traces_annotated`)."""
    return turn_flags(
        read_trace(trace),
        slow_ms=slow_threshold_ms(),
        thumbs_down=getattr(trace, "thumbs_down", False),
        thumbs_up=getattr(trace, "thumbs_up", False),
    )


# --- conversations --------------------------------------------------------------------------


@admin.register(Conversation)
class ConversationAdmin(
    RowTextMixin, ReviewListMixin, NoAddOrChangeMixin, ObjectContextAdmin[Conversation]
):
    """The conversation list with review filters; a conversation's page is its timeline.

    Staff read conversations; only their owners write them.
    """

    list_display = ["id", "safe_title", "owner", "turns", "thumbs_down", "created_at", "updated_at"]
    list_display_links = ["id", "safe_title"]
    list_filter = [
        ("owner", admin.RelatedOnlyFieldListFilter),
        "created_at",
        *FLAG_FILTERS,
    ]
    date_hierarchy = "created_at"
    # The title comes from the raw first message: search owners and masked questions only.
    search_fields = ["owner__username", "messages__trace__masked_question"]
    search_paths = ("pk", "messages__trace__masked_question", "owner__username")
    fields = ("owner", "created_at", "updated_at")
    readonly_fields = fields
    change_form_template = "admin/conversations/conversation/timeline.html"
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return (
            super()
            .get_queryset(request)
            .select_related("owner")
            .annotate(
                n_turns=Count("messages", filter=Q(messages__role="user"), distinct=True),
                n_down=Count(
                    "messages__feedback",
                    filter=Q(messages__feedback__value=-1),
                    distinct=True,
                ),
            )
        )

    def row_conversation(self, obj: Any) -> int:
        return int(obj.pk)

    def row_text(self, obj: Any) -> str:
        return masked_title(obj)

    @admin.display(description=gettext_lazy("title (masked)"))
    def safe_title(self, obj: Conversation) -> str:
        return _shown(obj) or _("(untitled)")

    @admin.display(description=gettext_lazy("turns"), ordering="n_turns")
    def turns(self, obj: Conversation) -> int:
        return int(getattr(obj, "n_turns", 0))

    @admin.display(description=gettext_lazy("thumbs down"), ordering="n_down")
    def thumbs_down(self, obj: Conversation) -> int:
        return int(getattr(obj, "n_down", 0))

    def change_context(self, request: HttpRequest, conversation: Conversation) -> dict[str, Any]:
        _record_access(request, conversation, "conversation timeline")
        redactor = redactors_by_conversation(
            viewer=_staff(request), conversation_ids=[conversation.pk]
        ).get(conversation.pk)
        title = masked_title(conversation)
        return {
            "timeline": conversation_timeline(conversation=conversation, viewer=_staff(request)),
            "masked_title": redactor.scrub(title) if redactor is not None else title,
            "slow_ms": _slow_ms(),
        }


def _slow_ms() -> int:
    return int(settings.CHATRAG_REVIEW_SLOW_MS)


# --- traces ---------------------------------------------------------------------------------


class MarkDocumentsForm(forms.Form):
    """Turn a reviewed turn into an evaluation case: the question and its right documents."""

    question = forms.CharField(widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    retrieved = forms.MultipleChoiceField(
        label=gettext_lazy("right documents among those retrieved"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    others = forms.ModelMultipleChoiceField(
        label=gettext_lazy("other right documents"),
        queryset=Document.objects.none(),
        required=False,
        widget=FilteredSelectMultiple(gettext_lazy("documents"), is_stacked=False),
    )
    category = forms.ChoiceField(choices=EvalCase.Category.choices)
    expect_clarification = forms.BooleanField(
        required=False, help_text=gettext_lazy("the right reply is a clarification question")
    )
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))

    def __init__(
        self, *args: Any, retrieved: list[tuple[str, str]], viewer: User, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        collection = default_collection()
        self.collection = collection
        retrieved_field = self.fields["retrieved"]
        assert isinstance(retrieved_field, forms.MultipleChoiceField)
        retrieved_field.choices = [(d, f"{t} ({d})") for d, t in retrieved]
        others = self.fields["others"]
        assert isinstance(others, forms.ModelMultipleChoiceField)
        others.queryset = (
            documents_readable(user=viewer).filter(collection=collection).order_by("external_id")
        )
        self.readable = others.queryset

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        ids = set(data.get("retrieved") or [])
        documents = list(self.readable.filter(external_id__in=ids))
        documents += [d for d in data.get("others") or [] if d.external_id not in ids]
        if not documents and not data.get("expect_clarification"):
            raise forms.ValidationError(
                _("Mark at least one right document, or that a clarification was right.")
            )
        data["documents"] = documents
        return data


@admin.register(TurnTrace)
class TurnTraceAdmin(
    RowTextMixin, ReviewListMixin, NoAddOrChangeMixin, ObjectContextAdmin[TurnTrace]
):
    """Every turn; a turn's page shows its whole trace, with retry and marking tools."""

    list_display = [
        "id",
        "conversation",
        "owner",
        "question",
        "backend",
        "flag_list",
        "total_ms",
        "created_at",
    ]
    list_filter = [*FLAG_FILTERS, RewriteCacheFilter, "created_at", "reviewed_at"]
    search_fields = ["masked_question", "message__conversation__owner__username"]
    date_hierarchy = "created_at"
    fields = ("created_at",)
    readonly_fields = fields
    change_form_template = "admin/conversations/turntrace/review.html"
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[TurnTrace]:
        return traces_annotated(super().get_queryset(request)).select_related(
            "message__conversation__owner"
        )

    @admin.display(description=gettext_lazy("conversation"))
    def conversation(self, obj: TurnTrace) -> str:
        return _conversation_link(obj.message.conversation_id)

    @admin.display(description=gettext_lazy("user"))
    def owner(self, obj: TurnTrace) -> str:
        return obj.message.conversation.owner.get_username()

    @admin.display(description=gettext_lazy("question (masked)"))
    def question(self, obj: TurnTrace) -> str:
        text = _shown(obj)
        return text if len(text) <= 90 else text[:89] + "…"

    @admin.display(description=gettext_lazy("rewrite"))
    def backend(self, obj: TurnTrace) -> str:
        rewrite = read_trace(obj).rewrite
        return f"{rewrite.backend} (cache)" if rewrite.cache == "hit" else rewrite.backend

    @admin.display(description=gettext_lazy("flags"))
    def flag_list(self, obj: TurnTrace) -> str:
        return ", ".join(str(FLAG_LABELS[f]) for f in _trace_flags(obj))

    @admin.display(description=gettext_lazy("total (ms)"), ordering="total_ms")
    def total_ms(self, obj: TurnTrace) -> object:
        value = getattr(obj, "total_ms", None)
        return round(value) if value is not None else "–"

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path(
                "<int:trace_id>/retry/", wrap(self.retry_view), name="conversations_turntrace_retry"
            ),
            path(
                "<int:trace_id>/mark-documents/",
                wrap(self.mark_documents_view),
                name="conversations_turntrace_mark_documents",
            ),
            path(
                "<int:trace_id>/reviewed/",
                wrap(self.reviewed_view),
                name="conversations_turntrace_reviewed",
            ),
            *super().get_urls(),
        ]

    def _trace(self, request: HttpRequest, trace_id: int) -> TurnTrace:
        trace = (
            TurnTrace.objects.select_related("message__conversation__owner")
            .filter(pk=trace_id)
            .first()
        )
        if trace is None:
            raise Http404("no such turn")
        if not self.has_view_permission(request, trace):
            raise PermissionDenied
        return trace

    def change_context(self, request: HttpRequest, trace: TurnTrace) -> dict[str, Any]:
        conversation = trace.message.conversation
        _record_access(request, conversation, "turn trace")
        return {
            "turn": turn_review_for_trace(trace=trace, viewer=_staff(request)),
            "conversation": conversation,
            "candidates": glossary_candidates_for([trace], viewer=_staff(request)).get(
                trace.id, []
            ),
            "collection_id": default_collection().id,
            "slow_ms": _slow_ms(),
        }

    def retry_view(self, request: HttpRequest, trace_id: int) -> HttpResponse:
        trace = self._trace(request, trace_id)
        _record_access(request, trace.message.conversation, "retry retrieval")
        viewer = _staff(request)
        result = turn_retry(trace=trace, viewer=viewer)
        before = ranking_redacted(viewer=viewer, ranking=read_trace(trace).search.ranking())
        redactor = TurnRedactor.for_turn(viewer=viewer, question=trace.message)
        context = {
            "title": _("Retrieval of this turn, now"),
            "trace": trace,
            "masked_question": redactor.scrub(trace.masked_question),
            "limited": not redactor.everything,
            "result": result,
            "before": before[:10],
            "after": result.documents[:10],
            "newly_first": bool(result.documents)
            and (not before or before[0][0] != result.documents[0][0]),
        }
        return admin_page(self, request, "admin/conversations/turntrace/retry.html", context)

    def mark_documents_view(self, request: HttpRequest, trace_id: int) -> HttpResponse:
        trace = self._trace(request, trace_id)
        if not request.user.has_perm("quality.add_evalcase"):
            raise PermissionDenied
        _record_access(request, trace.message.conversation, "mark documents")
        viewer = _staff(request)
        redactor = TurnRedactor.for_turn(viewer=viewer, question=trace.message)
        # Only documents the staff member may read are offered (a choice's value is its id).
        stored = read_trace(trace)
        ranking = stored.search.ranking()[:10]
        retrieved = [(d, t) for d, t in ranking if redactor.hit_readable(d)]
        hidden = len(ranking) - len(retrieved)
        window = redactor.window(question=trace.message, window=stored.masked_window)
        if request.method == "POST":
            form = MarkDocumentsForm(request.POST, retrieved=retrieved, viewer=viewer)
            if form.is_valid():
                case = eval_case_create(
                    collection=form.collection,
                    question=form.cleaned_data["question"],
                    history=[{"role": m.role, "text": m.text} for m in window],
                    documents=form.cleaned_data["documents"],
                    category=form.cleaned_data["category"],
                    expect_clarification=form.cleaned_data["expect_clarification"],
                    note=form.cleaned_data["note"],
                    source_message_id=trace.message_id,
                    user=_staff(request),
                    history_documents=window_documents(question=trace.message),
                )
                # Saving a case needs its own permission; marking the turn reviewed needs the
                # change permission on turns, like every other review state change.
                if can_review(request):
                    traces_mark_reviewed(
                        traces=TurnTrace.objects.filter(pk=trace.pk), user=_staff(request)
                    )
                    saved = _("Evaluation case %(id)s saved; the turn is reviewed.")
                else:
                    saved = _("Evaluation case %(id)s saved; the turn stays open for review.")
                messages.success(request, saved % {"id": case.pk})
                return HttpResponseRedirect(
                    reverse("admin:quality_evalcase_change", args=[case.pk])
                )
        else:
            if trace.clarified:
                category = EvalCase.Category.CLARIFICATION
            elif window:
                category = EvalCase.Category.FOLLOW_UP
            else:
                category = EvalCase.Category.STANDALONE
            form = MarkDocumentsForm(
                initial={
                    "question": redactor.scrub(trace.masked_question),
                    "category": category,
                    "expect_clarification": trace.clarified,
                },
                retrieved=retrieved,
                viewer=viewer,
            )
        context = {
            "title": _("Mark the right documents"),
            "trace": trace,
            "window": window,
            "hidden": hidden,
            "form": form,
            "media": self.media + form.media,
        }
        return admin_page(
            self, request, "admin/conversations/turntrace/mark_documents.html", context
        )

    def reviewed_view(self, request: HttpRequest, trace_id: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponse(status=405, headers={"Allow": "POST"})
        trace = self._trace(request, trace_id)
        if not can_review(request):
            raise PermissionDenied
        traces = TurnTrace.objects.filter(pk=trace.pk)
        if request.POST.get("open"):
            traces_mark_open(traces=traces)
            messages.info(request, _("The turn is back on the panel."))
        else:
            traces_mark_reviewed(traces=traces, user=_staff(request))
            messages.success(request, _("The turn is marked as reviewed."))
        return HttpResponseRedirect(
            reverse("admin:conversations_turntrace_change", args=[trace.pk])
        )


# --- the "needs attention" panel ------------------------------------------------------------


class AttentionChangeList(ScrubbedChangeList):
    """Adds glossary candidates to the page's rows with one vocabulary query."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        candidates = glossary_candidates_for(list(self.result_list), viewer=_staff(request))
        for trace in self.result_list:
            trace.candidates = candidates.get(trace.id, [])


@admin.register(AttentionTurn)
class AttentionTurnAdmin(
    RowTextMixin, ReviewListMixin, NoAddOrChangeMixin, admin.ModelAdmin[AttentionTurn]
):
    """Turns with no or weak results, an answer that found nothing to quote, a thumbs down
    or an anomaly, with what to do next."""

    list_display = ["when", "conversation", "owner", "question", "reasons", "next_steps"]
    list_filter = [ReviewedFilter, ReasonFilter, "created_at"]
    search_fields = ["masked_question", "message__conversation__owner__username"]
    actions = ["mark_reviewed", "mark_open"]
    list_per_page = 50

    def get_queryset(self, request: HttpRequest) -> QuerySet[AttentionTurn]:
        return attention_traces(super().get_queryset(request), include_reviewed=True)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return AttentionChangeList

    @admin.display(description=gettext_lazy("when"), ordering="created_at")
    def when(self, obj: AttentionTurn) -> str:
        url = reverse("admin:conversations_turntrace_change", args=[obj.pk])
        when = f"{timezone.localtime(obj.created_at):%Y-%m-%d %H:%M}"  # the site's time zone
        return format_html('<a href="{}">{}</a>', url, when)

    @admin.display(description=gettext_lazy("conversation"))
    def conversation(self, obj: AttentionTurn) -> str:
        return _conversation_link(obj.message.conversation_id)

    @admin.display(description=gettext_lazy("user"))
    def owner(self, obj: AttentionTurn) -> str:
        return obj.message.conversation.owner.get_username()

    @admin.display(description=gettext_lazy("question (masked)"))
    def question(self, obj: AttentionTurn) -> str:
        return _shown(obj)

    @admin.display(description=gettext_lazy("why"))
    def reasons(self, obj: AttentionTurn) -> str:
        flags = [f for f in _trace_flags(obj) if f in ATTENTION_FLAGS]
        return ", ".join(str(FLAG_LABELS[f]) for f in flags)

    @admin.display(description=gettext_lazy("next steps"))
    def next_steps(self, obj: AttentionTurn) -> str:
        candidates: list[str] = getattr(obj, "candidates", [])
        glossary = reverse("admin:retrieval_glossaryentry_add")
        collection = default_collection().id
        links = [
            format_html(
                '<a class="attention-glossary" href="{}?{}">{}</a>',
                glossary,
                urlencode({"term": term, "collection": collection, "from_trace": obj.pk}),
                _("add “%(term)s” to the glossary") % {"term": term},
            )
            for term in candidates
        ]
        if not candidates:
            links.append(
                format_html(
                    '<a class="attention-glossary" href="{}?{}">{}</a>',
                    glossary,
                    urlencode({"collection": collection, "from_trace": obj.pk}),
                    _("add to the glossary"),
                )
            )
        links.append(
            format_html(
                '<a class="attention-mark" href="{}">{}</a>',
                reverse("admin:conversations_turntrace_mark_documents", args=[obj.pk]),
                _("mark the right documents"),
            )
        )
        links.append(
            format_html(
                '<a class="attention-retry" href="{}">{}</a>',
                reverse("admin:conversations_turntrace_retry", args=[obj.pk]),
                _("retry now"),
            )
        )
        return format_html("<br>".join(["{}"] * len(links)), *links)

    def has_review_permission(self, request: HttpRequest) -> bool:
        return can_review(request)

    @admin.action(
        description=gettext_lazy("Mark selected turns as reviewed"), permissions=["review"]
    )
    def mark_reviewed(self, request: HttpRequest, queryset: QuerySet[AttentionTurn]) -> None:
        count = traces_mark_reviewed(traces=queryset, user=_staff(request))
        self.message_user(request, _("%(count)d turns marked as reviewed.") % {"count": count})

    @admin.action(
        description=gettext_lazy("Put selected turns back on the panel"), permissions=["review"]
    )
    def mark_open(self, request: HttpRequest, queryset: QuerySet[AttentionTurn]) -> None:
        count = traces_mark_open(traces=queryset)
        self.message_user(request, _("%(count)d turns reopened.") % {"count": count})

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # One page per turn: the trace's own.
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(
            reverse("admin:conversations_turntrace_change", args=[object_id])
        )


# --- feedback and the access log --------------------------------------------------------------


class FeedbackChangeList(ChangeList):
    """Marks the page's feedback given on answers the viewer may not read (two queries)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        messages_ = [r.message for r in rows] + [r.message.reply_to for r in rows]
        redactor = TurnRedactor(viewer=_staff(request), messages=[m for m in messages_ if m])
        for row in rows:
            row.answer_hidden = redactor.answer_hidden(answer=row.message)


@admin.register(Feedback)
class FeedbackAdmin(ReviewListMixin, NoAddOrChangeMixin, admin.ModelAdmin[Feedback]):
    list_display = ["id", "conversation", "user", "value", "safe_reason", "created_at"]
    list_filter = ["value", "created_at"]
    fields = ("user", "value", "created_at")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Feedback]:
        return super().get_queryset(request).select_related("message__reply_to__trace", "user")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return FeedbackChangeList

    @admin.display(description=gettext_lazy("conversation"))
    def conversation(self, obj: Feedback) -> str:
        return _conversation_link(obj.message.conversation_id)

    @admin.display(description=gettext_lazy("reason (masked)"))
    def safe_reason(self, obj: Feedback) -> str:
        # A reason given on an answer the viewer may not read may quote it.
        if getattr(obj, "answer_hidden", True) and obj.reason:
            return str(RESTRICTED_PASSAGE)
        return display_masker(obj.user).mask(obj.reason)


@admin.register(StaffAccessLog)
class StaffAccessLogAdmin(NoAddOrChangeMixin, admin.ModelAdmin[StaffAccessLog]):
    """Who opened which conversation, when and how; superusers only, never editable."""

    list_display = ["created_at", "username", "conversation_link", "view", "path"]
    list_filter = ["view", "created_at"]
    search_fields = ["username", "=conversation_ref"]
    date_hierarchy = "created_at"
    fields = ("created_at", "username", "conversation_ref", "view", "path")
    readonly_fields = fields

    @admin.display(description=gettext_lazy("conversation"))
    def conversation_link(self, obj: StaffAccessLog) -> str:
        if obj.conversation_ref is None:
            return "–"
        if obj.conversation_id is None:
            return _("%(id)s (deleted)") % {"id": obj.conversation_ref}
        return _conversation_link(obj.conversation_ref)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
