"""Staff review of conversations: every turn's trace, feedback and timings."""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html

from conversations.models import Conversation, Feedback, Message, TurnTrace


class MessageInline(admin.StackedInline[Message, Conversation]):
    model = Message
    fields = ("role", "status", "text", "sources_count", "error", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="sources")
    def sources_count(self, obj: Message) -> int:
        return len(obj.sources or [])


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin[Conversation]):
    list_display = ["id", "title", "owner", "updated_at"]
    list_filter = ["owner", "updated_at"]
    search_fields = ["title", "owner__username"]
    readonly_fields = ["owner", "title", "created_at", "updated_at"]
    inlines = [MessageInline]


@admin.register(TurnTrace)
class TurnTraceAdmin(admin.ModelAdmin[TurnTrace]):
    list_display = [
        "message",
        "backend",
        "anomaly",
        "clarified",
        "no_results",
        "total_ms",
        "created_at",
    ]
    list_filter = ["anomaly", "clarified", "no_results", "created_at"]
    search_fields = ["masked_question"]
    readonly_fields = [
        "message",
        "masked_question",
        "pretty_window",
        "pretty_rewrite",
        "pretty_search",
        "timings_ms",
        "errors",
        "anomaly",
        "clarified",
        "no_results",
    ]
    exclude = ["masked_window", "rewrite", "search"]

    @admin.display(description="backend")
    def backend(self, obj: TurnTrace) -> str:
        return str(obj.rewrite.get("backend", ""))

    @admin.display(description="done (ms)")
    def total_ms(self, obj: TurnTrace) -> object:
        return obj.timings_ms.get("to_done", "")

    def _pre(self, value: object) -> str:
        return format_html("<pre>{}</pre>", json.dumps(value, ensure_ascii=False, indent=1))

    @admin.display(description="window (masked)")
    def pretty_window(self, obj: TurnTrace) -> str:
        return self._pre(obj.masked_window)

    @admin.display(description="rewrite")
    def pretty_rewrite(self, obj: TurnTrace) -> str:
        return self._pre(obj.rewrite)

    @admin.display(description="search: queries, hits with vector/text ranks, passages")
    def pretty_search(self, obj: TurnTrace) -> str:
        return self._pre(obj.search)


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin[Feedback]):
    list_display = ["message", "user", "value", "reason", "created_at"]
    list_filter = ["value"]
