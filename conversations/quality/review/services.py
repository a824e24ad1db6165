"""Write side of staff review: the access log, marking turns reviewed, retrying a turn."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from conversations.models import Conversation, Message, StaffAccessLog, TurnTrace
from conversations.quality.review.restricted import TurnRedactor, ranking_redacted
from conversations.selectors import history_before
from conversations.trace import TraceGlossaryHit, TraceQuery, TraceRewrite, TraceSearch
from conversations.turn import turn_context, turn_context_of
from retrieval.access import RESTRICTED_PASSAGE
from retrieval.pipeline.fusion import ranked_documents
from retrieval.pipeline.masking import Masker, MaskingConfig
from retrieval.pipeline.plan import plan_turn
from retrieval.pipeline.types import HistoryMessage
from retrieval.services import employee_id_pattern, scope_common, scope_for_user


def staff_access_record(
    *, user: User, conversation: Conversation, view: str, path: str = ""
) -> StaffAccessLog:
    """Record that a staff member opened a conversation's data, and through which view."""
    return StaffAccessLog.objects.create(
        user=user,
        username=user.get_username(),
        conversation=conversation,
        conversation_ref=conversation.pk,
        view=view[:100],
        path=path[:500],
    )


def staff_list_access_record(*, user: User, view: str, path: str) -> StaffAccessLog:
    """Record that a staff member opened a review list (its filters and search in `path`)."""
    return StaffAccessLog.objects.create(
        user=user, username=user.get_username(), view=view[:100], path=_query_masked(path)[:500]
    )


def _query_masked(path: str) -> str:
    """The path with personal data masked in its query's values.

    Staff search lists for what they are looking into: `?q=529.982.247-25` stayed in the
    log as typed (kept like the rest of the log, long after the conversation is gone).
    """
    base, _, query = path.partition("?")
    if not query:
        return path
    masker = Masker(MaskingConfig(employee_id_pattern=employee_id_pattern()))
    pairs = [(k, masker.mask(v)) for k, v in parse_qsl(query, keep_blank_values=True)]
    return f"{base}?{urlencode(pairs)}"


def traces_mark_reviewed(*, traces: QuerySet[Any], user: User) -> int:
    """Take turns off the "needs attention" panel."""
    return int(
        traces.filter(reviewed_at__isnull=True).update(reviewed_at=timezone.now(), reviewed_by=user)
    )


def traces_mark_open(*, traces: QuerySet[Any]) -> int:
    """Put turns back on the panel."""
    return int(traces.update(reviewed_at=None, reviewed_by=None))


@dataclass
class RetryResult:
    """What the same turn retrieves now (current glossary and settings), masked."""

    backend: str
    queries: list[TraceQuery]
    glossary_hits: list[TraceGlossaryHit]
    documents: list[tuple[str, str]]
    errors: list[str] = field(default_factory=list)


def turn_retry(*, trace: TurnTrace, viewer: User) -> RetryResult:
    """Run the retrieval half of a stored turn again, without storing anything.

    Staff use it to check that a glossary entry or a re-indexed document fixed the turn. It
    searches as the turn's owner would, but only over what `viewer` may read too (the
    intersection of both scopes, vocabulary included), with earlier answers the viewer may
    not read left out of the window; what comes back is placeholdered like the timeline.
    """
    ctx = turn_context(trace.message_id)
    redactor = TurnRedactor.for_turn(viewer=viewer, question=ctx.message)
    if not redactor.everything:
        ctx = turn_context_of(
            ctx.message,
            collection=ctx.collection,
            scope=scope_common(
                ctx.request.scope, scope_for_user(user=viewer, collection=ctx.collection)
            ),
            history=_history_for(redactor, ctx.message, list(ctx.request.history)),
        )
    outcome = async_to_sync(plan_turn)(ctx.request, ctx.backends).outcome
    titles = {m.hit.external_id: m.hit.title for m in outcome.merged}
    ranking = [(d, titles.get(d, "")) for d in ranked_documents(outcome.merged)]
    rewrite = TraceRewrite.of(outcome.rewrite)
    return RetryResult(
        backend=rewrite.backend,
        queries=[replace(q, text=redactor.scrub(q.text)) for q in TraceSearch.of(outcome).queries],
        glossary_hits=list(rewrite.glossary),
        documents=ranking_redacted(viewer=viewer, ranking=ranking),
        errors=[redactor.scrub(e) for e in outcome.errors],
    )


def _history_for(
    redactor: TurnRedactor, question: Message, history: list[HistoryMessage]
) -> list[HistoryMessage]:
    """The turn's window without the earlier answers the viewer may not read."""
    earlier = history_before(message=question, limit=settings.CHATRAG_REWRITE_WINDOW)
    hidden = str(RESTRICTED_PASSAGE)
    if len(earlier) != len(history):  # cannot pair them: hide every answer after a hidden one
        drop = redactor.window_hidden(question=question)
        return [
            HistoryMessage(h.role, hidden) if drop and h.role == "assistant" else h for h in history
        ]
    return [
        HistoryMessage(h.role, hidden)
        if m.role == Message.Role.ASSISTANT and redactor.answer_hidden(answer=m)
        else h
        for m, h in zip(earlier, history, strict=True)
    ]
