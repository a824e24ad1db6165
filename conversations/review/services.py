"""Write side of staff review: the access log, marking turns reviewed, retention, retrying."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from conversations.models import Conversation, StaffAccessLog, TurnTrace
from conversations.turns import turn_context, turn_retrieve
from retrieval.pipeline.answer import answer_language
from retrieval.pipeline.fusion import ranked_documents


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
        user=user, username=user.get_username(), view=view[:100], path=path[:500]
    )


def traces_mark_reviewed(*, traces: QuerySet[Any], user: User) -> int:
    """Take turns off the "needs attention" panel."""
    return int(
        traces.filter(reviewed_at__isnull=True).update(reviewed_at=timezone.now(), reviewed_by=user)
    )


def traces_mark_open(*, traces: QuerySet[Any]) -> int:
    """Put turns back on the panel."""
    return int(traces.update(reviewed_at=None, reviewed_by=None))


@transaction.atomic
def conversations_purge_expired(*, days: int, now: datetime | None = None) -> int:
    """Delete conversations not updated for `days` days (0 keeps everything).

    Messages, traces and feedback go with them; evaluation cases made from them keep their
    masked question, and the access log keeps the conversation's id only.
    """
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    expired = Conversation.objects.filter(updated_at__lt=cutoff)
    count = expired.count()
    expired.delete()
    return count


@dataclass
class RetryResult:
    """What the same turn retrieves now (current glossary and settings), masked."""

    backend: str
    queries: list[dict[str, Any]]
    glossary_hits: list[dict[str, Any]]
    documents: list[tuple[str, str]]
    errors: list[str] = field(default_factory=list)


def turn_retry(*, trace: TurnTrace) -> RetryResult:
    """Run the retrieval half of a stored turn again, as its owner, without storing anything.

    Staff use it to check that a glossary entry or a re-indexed document fixed the turn.
    """
    ctx = turn_context(trace.message_id)
    outcome = async_to_sync(turn_retrieve)(ctx, language=answer_language(ctx.question))
    titles = {m.hit.external_id: m.hit.title for m in outcome.merged}
    return RetryResult(
        backend=outcome.rewrite.backend,
        queries=outcome.trace_search()["queries"],
        glossary_hits=outcome.rewrite.to_dict()["glossary_hits"],  # type: ignore[arg-type]
        documents=[(d, titles.get(d, "")) for d in ranked_documents(outcome.merged)],
        errors=outcome.errors,
    )
