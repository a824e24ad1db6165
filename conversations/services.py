"""Write-side services for conversations: create, store messages, feedback."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

# The message rules are pure and live with the frame parsing; re-exported for callers here.
from conversations.frames import InvalidMessage as InvalidMessage
from conversations.frames import clean_user_text as clean_user_text
from conversations.models import Conversation, Feedback, Message, TurnTrace

logger = logging.getLogger(__name__)

# Sent by `trace_write` inside the transaction that writes a turn's trace, with `message` (the
# question) and `fields` (`conversations.trace.trace_fields`). The quality app, which this app
# may not import, queues a sample of rewrites for staff review with it
# (`conversations.quality.fidelity`): in the same transaction, with no statement of its own for
# a turn it does not sample.
turn_traced = Signal()


def title_from_text(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rsplit(" ", 1)[0] + "…"


@transaction.atomic
def conversation_create(*, user: User, title: str = "") -> Conversation:
    return Conversation.objects.create(owner=user, title=title[:200])


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    conversation.title = " ".join(title.split())[:200]
    conversation.save(update_fields=["title", "updated_at"])
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    conversation.delete()


@transaction.atomic
def message_store_user(*, conversation: Conversation, text: str) -> Message:
    """Store the user's message before any work on it; name the conversation after it."""
    message = Message.objects.create(
        conversation=conversation,
        role=Message.Role.USER,
        text=text,
        status=Message.Status.RECEIVED,
    )
    if not conversation.title:
        conversation.title = title_from_text(text)
    conversation.updated_at = timezone.now()
    conversation.save(update_fields=["title", "updated_at"])
    return message


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


# --- a turn's writes: as few statements as keep it consistent ------------------------------


def trace_write(*, message: Message, fields: dict[str, Any]) -> None:
    """Write the turn's trace (`conversations.trace.trace_fields`), whether it has one yet or
    not: one INSERT ... ON CONFLICT, where update_or_create read, then wrote in a savepoint."""
    TurnTrace.objects.bulk_create(
        [TurnTrace(message=message, **fields)],
        update_conflicts=True,
        unique_fields=["message"],
        update_fields=list(fields),
    )
    turn_traced.send(sender=TurnTrace, message=message, fields=fields)


@transaction.atomic
def answer_start(
    *,
    question: Message,
    trace: dict[str, Any],
    status: str,
    text: str = "",
    sources: list[dict[str, Any]] | None = None,
) -> Message:
    """Store the turn's trace and its answer, and mark the question answered: together or
    not at all (an answer row without its question marked would stay "streaming")."""
    trace_write(message=question, fields=trace)
    answer = Message.objects.create(
        conversation_id=question.conversation_id,
        role=Message.Role.ASSISTANT,
        text=text,
        status=status,
        reply_to=question,
        sources=sources or [],
    )
    Message.objects.filter(pk=question.pk).update(status=Message.Status.COMPLETE)
    return answer


def answer_write(
    *,
    answer: Message,
    text: str,
    status: str | None = None,
    error: str = "",
    extractive: bool | None = None,
) -> None:
    """Save the answer's text so far (and, at its end, its status): one UPDATE."""
    answer.text = text
    fields = ["text", "updated_at"]
    if status is not None:
        answer.status = status
        fields.append("status")
    if error:
        answer.error = error
        fields.append("error")
    if extractive is not None:
        answer.extractive = extractive
        fields.append("extractive")
    answer.save(update_fields=fields)


@transaction.atomic
def answer_finish(
    *,
    question: Message,
    answer: Message,
    text: str,
    status: str,
    error: str,
    extractive: bool,
    timings_ms: dict[str, float],
    errors: Sequence[str],
    check: dict[str, Any] | None = None,
) -> None:
    """Store the finished answer, and the turn's timings, errors and answer check (who wrote
    it, why its lines: `Answer.why`) in its trace.

    One transaction: each commit waits for the disk (about 3.5 ms here, a round trip 0.1 ms),
    so the two writes share one. The trace's timings and errors are replaced, not read and
    merged: the turn knows what it wrote. They are diagnostics: failing to store them (in a
    savepoint) never fails the answer.
    """
    answer_write(answer=answer, text=text, status=status, error=error, extractive=extractive)
    try:
        with transaction.atomic():
            TurnTrace.objects.filter(message=question).update(
                timings_ms=timings_ms, errors=list(errors), answer=check or {}
            )
    except DatabaseError:
        logger.exception("turn %s: could not store its timings", question.id)


@transaction.atomic
def turn_fail(
    *,
    question: Message,
    answer: Message | None,
    text: str,
    failure: str,
    trace: dict[str, Any],
) -> None:
    """Record a failed turn: the answer written so far (if it was started) marked failed, the
    trace with the failure among its errors, and the question failed; together or not at all
    (an answer never stays "streaming")."""
    if answer is not None:
        answer_write(answer=answer, text=text, status=Message.Status.ERROR, error=failure)
    trace_write(message=question, fields=trace)
    Message.objects.filter(pk=question.pk).update(status=Message.Status.ERROR)


def feedback_set(*, message: Message, user: User, value: int, reason: str = "") -> Feedback:
    """Record (or change) a user's thumbs up/down on an assistant answer."""
    if value not in (1, -1):
        raise InvalidMessage("feedback must be 1 or -1")
    if message.role != Message.Role.ASSISTANT:
        raise InvalidMessage("feedback applies to answers only")
    feedback, _ = Feedback.objects.update_or_create(
        message=message, user=user, defaults={"value": value, "reason": reason.strip()[:2000]}
    )
    return feedback


INTERRUPTED_ERROR = "interrupted: the server stopped while this turn was running"


@transaction.atomic
def messages_fail_interrupted(*, before: datetime | None = None) -> int:
    """Mark the turns a stopped server left unfinished as failed; return how many messages.

    A question still "received" or an answer still "streaming" that no process works on any
    more would show as in progress for ever; failed, the page offers to ask again and keeps
    the text already written. `before`: only messages untouched since then (other servers may
    be mid-turn); None: all of them, when no other server runs.
    """
    stuck = Message.objects.filter(
        Q(role=Message.Role.USER, status=Message.Status.RECEIVED)
        | Q(role=Message.Role.ASSISTANT, status=Message.Status.STREAMING)
    )
    if before is not None:
        stuck = stuck.filter(updated_at__lt=before)
    return stuck.update(
        status=Message.Status.ERROR, error=INTERRUPTED_ERROR, updated_at=timezone.now()
    )


def interrupted_idle_limit() -> timedelta:
    """How long an unfinished turn stays untouched before no process can be working on it:
    CHATRAG_INTERRUPTED_AFTER_SECONDS, or a model stall plus a rewrite and a margin."""
    if settings.CHATRAG_INTERRUPTED_AFTER_SECONDS:
        return timedelta(seconds=settings.CHATRAG_INTERRUPTED_AFTER_SECONDS)
    return timedelta(seconds=settings.CHATRAG_LLM_TIMEOUT + settings.CHATRAG_REWRITE_TIMEOUT + 60)


def messages_recover_interrupted() -> int:
    """Fail the unfinished turns untouched for longer than `interrupted_idle_limit()` (safe
    while other processes run turns: a live turn writes more often than that)."""
    return messages_fail_interrupted(before=timezone.now() - interrupted_idle_limit())
