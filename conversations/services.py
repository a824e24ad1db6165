"""Write-side services for conversations: create, store messages, feedback."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from conversations.models import Conversation, Feedback, Message


class InvalidMessage(ValueError):
    """The user's message cannot be accepted (empty, too long, not text)."""


def clean_user_text(text: object, *, max_chars: int) -> str:
    """Validate a user's message: text, not blank, within the size limit, no control chars."""
    if not isinstance(text, str):
        raise InvalidMessage("message must be text")
    cleaned = "".join(ch for ch in text if ch in "\n\t" or ch.isprintable()).strip()
    if not cleaned:
        raise InvalidMessage("message is empty")
    if len(cleaned) > max_chars:
        raise InvalidMessage(f"message is too long ({len(cleaned)} > {max_chars} characters)")
    return cleaned


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
