"""What a person may still read of their own past answers (issue 38, finding 12).

The rule: a conversation shows its owner only what the owner may read now. An answer written
from a document the owner may no longer read (they left the document's group), or one naming
such a document's title (a clarification offers titles as options), is shown as "no longer
available to you", without its text or its source cards, on the chat page and in the history
that later turns read (the rewrite's window, a model's prompt). The stored rows stay as they
were, for audit; staff pages follow their own rule (`conversations.quality.review.restricted`).

A document that no longer exists keeps its answers: its groups cannot be checked, and a
document replaced by a new upload would otherwise empty every conversation that cited it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from conversations.models import Conversation, Message, TurnTrace
from conversations.trace import read_trace
from retrieval.access import documents_readable
from retrieval.models import Document

NO_LONGER_AVAILABLE = _(
    "Esta resposta não está mais disponível para você: ela veio de um documento que você não "
    "pode mais ler."
)


def _sources(message: Message) -> list[dict[str, Any]]:
    return [s for s in message.sources or [] if isinstance(s, dict)]


def _document_id(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def answers_unreadable(*, user: User, messages: Sequence[Message]) -> frozenset[int]:
    """The ids of these assistant messages their reader may no longer read (three queries:
    the turns' traces, the reader's groups, the documents)."""
    answers = [m for m in messages if m.role == Message.Role.ASSISTANT and m.id is not None]
    if not answers or user.is_superuser:
        return frozenset()
    cited = {d for a in answers for s in _sources(a) if (d := _document_id(s.get("document_id")))}
    questions = [m.id for m in messages if m.role == Message.Role.USER]
    hits = [
        h
        for t in TurnTrace.objects.filter(message_id__in=questions)
        for h in read_trace(t).search.hits
    ]
    names = {h.document for h in hits}
    lost_ids: set[int] = set()
    lost_names: set[str] = set()
    if cited or names:
        # One query for both ways a trace names a document: by key (sources) and by
        # external id in the chat's collection (hits).
        unreadable = Document.objects.exclude(pk__in=documents_readable(user=user).values("pk"))
        chat = settings.CHATRAG_COLLECTION
        for pk, external_id, slug in unreadable.filter(
            Q(pk__in=cited) | Q(collection__slug=chat, external_id__in=names)
        ).values_list("pk", "external_id", "collection__slug"):
            if pk in cited:
                lost_ids.add(pk)
            if slug == chat and external_id in names:
                lost_names.add(external_id)
    titles = {h.title.strip().casefold() for h in hits if h.document in lost_names}
    titles |= {
        str(s.get("title") or "").strip().casefold()
        for a in answers
        for s in _sources(a)
        if _document_id(s.get("document_id")) in lost_ids
    }
    titles.discard("")
    return frozenset(
        a.id
        for a in answers
        if any(_document_id(s.get("document_id")) in lost_ids for s in _sources(a))
        or any(t in a.text.casefold() for t in titles)
    )


def messages_readable(*, user: User, messages: Iterable[Message]) -> list[Message]:
    """These messages as their reader may see them now: an answer they may no longer read is
    a copy with the note as its text and no sources (never saved)."""
    messages = list(messages)
    hidden = answers_unreadable(user=user, messages=messages)
    shown = []
    for message in messages:
        if message.id in hidden:
            copy = Message(
                id=message.id,
                conversation_id=message.conversation_id,
                role=message.role,
                text=str(NO_LONGER_AVAILABLE),
                status=message.status,
                reply_to_id=message.reply_to_id,
                sources=[],
                extractive=False,
                created_at=message.created_at,
                updated_at=message.updated_at,
            )
            copy.no_longer_available = True  # type: ignore[attr-defined]
            shown.append(copy)
        else:
            shown.append(message)
    return shown


def conversations_found(
    *, user: User, conversations: Sequence[Conversation], search: str
) -> list[Conversation]:
    """The sidebar search's conversations, without those it found only in an answer their
    owner may no longer read: the search must not tell what such an answer says."""
    if not search or not conversations:
        return list(conversations)
    needle = search.casefold()
    by_conversation: dict[int, list[Message]] = {}
    for message in Message.objects.filter(conversation__in=conversations).order_by("id"):
        by_conversation.setdefault(message.conversation_id, []).append(message)
    hidden = answers_unreadable(
        user=user, messages=[m for ms in by_conversation.values() for m in ms]
    )
    return [
        c
        for c in conversations
        if needle in c.title.casefold()
        or any(
            needle in m.text.casefold() and m.id not in hidden
            for m in by_conversation.get(c.id, [])
        )
    ]
