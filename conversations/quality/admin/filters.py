"""List filters for the review pages; one per flag, so flags combine (slow AND thumbs down)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import smart_split, unescape_string_literal
from django.utils.translation import gettext_lazy as _

from conversations.models import Conversation
from conversations.quality.review.selectors import (
    ATTENTION_FLAGS,
    conversations_with_flag,
    traces_with_flag,
)
from conversations.quality.review.timeline import FLAG_LABELS


class _FlagFilter(admin.SimpleListFilter):
    flag = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("yes"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() != "yes":
            return queryset
        if queryset.model is Conversation or issubclass(queryset.model, Conversation):
            return conversations_with_flag(self.flag, queryset)
        return traces_with_flag(self.flag, queryset)


def flag_filter(flag: str) -> type[admin.SimpleListFilter]:
    """A yes-only filter for one flag (works on conversations and on traces)."""
    return type(
        f"{flag.title().replace('_', '')}Filter",
        (_FlagFilter,),
        {"flag": flag, "title": FLAG_LABELS[flag], "parameter_name": flag},
    )


ThumbsDownFilter = flag_filter("thumbs_down")
ThumbsUpFilter = flag_filter("thumbs_up")
AnomalyFilter = flag_filter("anomaly")
ClarifiedFilter = flag_filter("clarified")
NoResultsFilter = flag_filter("no_results")
WeakFilter = flag_filter("weak")
NotFoundFilter = flag_filter("not_found")
ErrorsFilter = flag_filter("errors")
SlowFilter = flag_filter("slow")
FLAG_FILTERS = [
    ThumbsDownFilter,
    ThumbsUpFilter,
    AnomalyFilter,
    ClarifiedFilter,
    NoResultsFilter,
    WeakFilter,
    NotFoundFilter,
    ErrorsFilter,
    SlowFilter,
]


class RewriteCacheFilter(admin.SimpleListFilter):
    """Turns whose rewrite came from the cache, or was computed (with counts: the hit rate)."""

    title = _("rewrite cache")
    parameter_name = "rewrite_cache"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("hit", _("from the cache")), ("miss", _("rewritten"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(rewrite__cache=value) if value in {"hit", "miss"} else queryset


class ReasonFilter(admin.SimpleListFilter):
    """Why a turn is on the "needs attention" panel."""

    title = _("reason")
    parameter_name = "reason"

    REASONS = ATTENTION_FLAGS

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(f, FLAG_LABELS[f]) for f in self.REASONS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # A reason the panel does not offer (a typed URL) filters nothing, like the other
        # flag filters, instead of a server error.
        value = self.value()
        return traces_with_flag(value, queryset) if value in self.REASONS else queryset


class ReviewedFilter(admin.SimpleListFilter):
    """Open turns by default; reviewed ones, or all, on request."""

    title = _("review")
    parameter_name = "review"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("open", _("open")), ("reviewed", _("reviewed")), ("all", _("all"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or "open"
        if value == "open":
            return queryset.filter(reviewed_at__isnull=True)
        if value == "reviewed":
            return queryset.filter(reviewed_at__isnull=False)
        return queryset

    def choices(self, changelist: Any) -> Iterator[Any]:
        current = self.value() or "open"
        for value, label in self.lookup_choices:
            yield {
                "selected": current == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }


def search_terms(search_term: str) -> list[str]:
    """The admin's search terms, casefolded, split as `ModelAdmin.get_search_results` splits
    them: for lists that match only the text the viewer may read (issue 38, finding 4)."""
    terms = []
    for bit in smart_split(search_term):
        if bit.startswith(('"', "'")) and bit[0] == bit[-1] and len(bit) > 1:
            bit = unescape_string_literal(bit)
        if bit.strip():
            terms.append(bit.casefold())
    return terms
