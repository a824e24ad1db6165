"""Read-side queries for conversations; every one is scoped to its owner."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models import Q, QuerySet, Subquery
from django.http import Http404
from django.utils import timezone

from conversations.models import Conversation, Feedback, Message
from retrieval.access import documents_readable
from retrieval.models import Chunk, Document


def conversation_list(*, user: User, search: str = "") -> QuerySet[Conversation]:
    """The user's conversations, newest first, optionally filtered by title or content."""
    qs = Conversation.objects.filter(owner=user)
    if search:
        qs = qs.filter(Q(title__icontains=search) | Q(messages__text__icontains=search)).distinct()
    return qs


def conversation_get(*, user: User, conversation_id: int) -> Conversation:
    """The conversation if this user owns it; 404 otherwise (never another user's data)."""
    try:
        return Conversation.objects.get(pk=conversation_id, owner=user)
    except (Conversation.DoesNotExist, ValueError, TypeError) as exc:
        raise Http404("conversation not found") from exc


def message_get(*, user: User, message_id: int) -> Message:
    """A message of one of this user's conversations; 404 otherwise."""
    try:
        return Message.objects.select_related("conversation").get(
            pk=message_id, conversation__owner=user
        )
    except (Message.DoesNotExist, ValueError, TypeError) as exc:
        raise Http404("message not found") from exc


def conversation_messages(*, conversation: Conversation) -> list[Message]:
    """All messages with their traces, in order (one query for messages, one for traces)."""
    return list(conversation.messages.select_related("trace").order_by("created_at", "id"))


def history_before(*, message: Message, limit: int) -> list[Message]:
    """The last `limit` finished messages before this one, oldest first."""
    if limit <= 0:
        return []
    qs = (
        Message.objects.filter(conversation_id=message.conversation_id, id__lt=message.id)
        .exclude(text="")
        .exclude(status=Message.Status.ERROR)
        .order_by("-id")[:limit]
    )
    return list(reversed(list(qs)))


def document_readable(*, user: User, document_id: int) -> Document:
    """A document this user may read (public, shares a group, or superuser); 404 otherwise."""
    try:
        return documents_readable(user=user).get(pk=document_id)
    except (Document.DoesNotExist, ValueError, TypeError) as exc:
        raise Http404("document not found") from exc


def document_chunks(*, document: Document) -> list[Chunk]:
    """The document's passages in reading order."""
    return list(document.chunks.order_by("position").only("id", "position", "heading", "text"))


def feedback_values(*, user: User, message_ids: list[int]) -> dict[int, int]:
    """This user's thumbs (1 or -1) on the given answers, by message id."""
    return dict(
        Feedback.objects.filter(user=user, message_id__in=message_ids).values_list(
            "message_id", "value"
        )
    )


@dataclass(frozen=True)
class SessionSeen:
    """What a full check of a chat socket's session accepted: the session's data, decoded,
    and its user's password hash (the session's auth hash is made from it)."""

    data: dict[str, Any]
    password: str


def session_unchanged(*, session_key: str, user_id: int, seen: SessionSeen) -> bool:
    """The session is still unexpired with the data `seen`, and its user still active with the
    same password: what the full check read (`channels.auth.get_user`: session, backend, user,
    `is_active`, auth hash) is unchanged, so it would accept it again. One query, where the full
    check makes two; False sends the caller to the full check, never closes a socket by itself.
    """
    store = import_module(settings.SESSION_ENGINE).SessionStore
    if not hasattr(store, "get_model_class"):  # sessions not in the database: no shortcut
        return False
    password = get_user_model().objects.filter(pk=user_id, is_active=True).values("password")
    row = (
        store.get_model_class()
        .objects.filter(session_key=session_key, expire_date__gt=timezone.now())
        .annotate(password=Subquery(password[:1]))
        .values_list("session_data", "password")
        .first()
    )
    if row is None or row[1] is None or row[1] != seen.password:
        return False
    return bool(store().decode(row[0]) == seen.data)
