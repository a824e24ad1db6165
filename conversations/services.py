"""Write-side services for conversations: create, store messages, feedback."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

# The message rules are pure and live with the frame parsing; re-exported for callers here.
from conversations.frames import InvalidMessage as InvalidMessage
from conversations.frames import clean_user_text as clean_user_text
from conversations.models import Conversation, Feedback, Message


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
