"""What one staff member may see of stored turns: restricted documents become placeholders.

The rule (README, "Security"): staff see a restricted document's title, id, passages and
source card, and any answer written from it, only if they may read the document themselves
(`retrieval.access.documents_readable`, the chat's rule); superusers see everything. So:

- a hit or a source of a document the viewer may not read shows "[restricted document]";
- an answer is hidden ("[restricted passage]") when one of the passages it was written from
  is unreadable (a model reads every passage it is given, cited or not), or when it names an
  unreadable document's title (a clarification offers titles as options, and the trace may
  keep an option's page past its stored hits: an option is checked by its title too);
- free text that the pipeline derived from hits (clarification question and options, notes,
  queries) has those titles replaced, and the id of any document of the collection the
  viewer may not read (the search evidence's notes name documents by id, also ones that are
  in no stored hit);
- an assistant message in a later turn's window is hidden once an earlier answer of the
  conversation was hidden (the window is the same text, masked);
- text derived from a document carries its permission (issue 38, finding 3): once a turn of
  the conversation repeats an unreadable title (a clicked clarification option) or got an
  answer the viewer may not read, the rules may carry any of its words into later turns
  (the topic, the expanded queries, the notes, the clarification), a few words at a time that
  replacing whole titles misses. From that turn on, that derived text is hidden whole
  ("[restricted passage]"); the person's own words (the question, its original query) are
  only scrubbed. Hiding whole, never word by word, so the page tells nothing of which words
  a restricted title has.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any

from django.contrib.auth.models import User

from conversations.models import Message, TurnTrace
from conversations.trace import TraceHit, TraceMessage, read_trace
from retrieval.access import (
    RESTRICTED_DOCUMENT,
    RESTRICTED_PASSAGE,
    DocumentAccess,
    document_access,
    external_ids_unreadable,
    replace_folded,
    titles_unreadable,
)
from retrieval.services import default_collection


def _trace_of(message: Message) -> TurnTrace | None:
    try:
        return message.trace
    except TurnTrace.DoesNotExist:
        return None


def _sources(answer: Message | None) -> list[dict[str, Any]]:
    return [s for s in (answer.sources if answer else None) or [] if isinstance(s, dict)]


def _hits(trace: TurnTrace | None) -> tuple[TraceHit, ...]:
    return read_trace(trace).search.hits if trace is not None else ()


def _options(trace: TurnTrace | None) -> tuple[str, ...]:
    clarification = read_trace(trace).rewrite.clarification if trace is not None else None
    return clarification.options if clarification is not None else ()


class TurnRedactor:
    """The placeholders one viewer gets on the turns of one conversation (two queries at most).

    Built from every message of the conversation, oldest first, so that a turn's window
    knows whether an earlier answer was hidden.
    """

    def __init__(self, *, viewer: User, messages: Sequence[Message]) -> None:
        self.viewer = viewer
        self._messages = list(messages)
        questions = [m for m in messages if m.role == Message.Role.USER]
        answers = [m for m in messages if m.role == Message.Role.ASSISTANT]
        self.access: DocumentAccess = document_access(
            user=viewer,
            collection=default_collection(),
            document_ids=[s.get("document_id") for a in answers for s in _sources(a)],
            external_ids=[h.document for q in questions for h in _hits(_trace_of(q))],
        )
        answer_of = {a.reply_to_id: a for a in answers if a.reply_to_id is not None}
        # Every unreadable title of the conversation: a later message may repeat one (a
        # clarification option, once clicked, is the person's next question).
        self.titles: set[str] = set()
        for question in questions:
            self.titles |= self._unreadable_titles(question, answer_of.get(question.id))
        # A clarification's options are titles whose pages may lie past the stored hits.
        self.titles |= titles_unreadable(
            user=viewer,
            collection=default_collection(),
            titles=[o for q in questions for o in _options(_trace_of(q))],
        )
        # The first hidden answer: assistant text in later windows may repeat it.
        self._hidden_from: int | None = None
        # The first question whose turn's derived text may repeat a restricted document's
        # words: it repeats an unreadable title, or it follows a hidden answer.
        self._derived_from: int | None = None
        for question in sorted(questions, key=lambda m: (m.created_at, m.id)):
            if self._derived_from is None and (
                self._hidden_from is not None or self._repeats_title(question.text)
            ):
                self._derived_from = question.id
            answer = answer_of.get(question.id)
            if (
                answer is not None
                and self._hidden_from is None
                and self.answer_hidden(answer=answer)
            ):
                self._hidden_from = answer.id

    @classmethod
    def for_turn(cls, *, viewer: User, question: Message) -> TurnRedactor:
        """For one turn's own pages (the whole conversation: a later turn may name a title)."""
        messages = list(
            Message.objects.filter(conversation_id=question.conversation_id)
            .select_related("trace")
            .order_by("created_at", "id")
        )
        return cls(viewer=viewer, messages=messages)

    # --- what is unreadable ---------------------------------------------------------------

    def _unreadable_titles(self, question: Message, answer: Message | None) -> set[str]:
        if self.access.everything:
            return set()
        titles = {
            h.title.strip()
            for h in _hits(_trace_of(question))
            if not self.access.can_read(external_id=h.document)
        }
        titles |= {
            str(s.get("title") or "").strip()
            for s in _sources(answer)
            if not self.access.can_read(document_id=s.get("document_id"))
        }
        return {t for t in titles if t}

    @cached_property
    def _ids_hidden(self) -> frozenset[str]:
        # Scrubbed from free text only, not matched against answers (no answer quotes a path);
        # read once, when a page first scrubs something. Only ids the conversation could name:
        # its stored hits, and documents its owner may read (its notes name what the owner's
        # searches found). Any other id is text someone typed, and replacing it would tell
        # the viewer that a document they may not read has that id.
        if self.access.everything:
            return frozenset()
        hits = {
            h.document
            for m in self._messages
            if m.role == Message.Role.USER
            for h in _hits(_trace_of(m))
            if not self.access.can_read(external_id=h.document)
        }
        conversations = {m.conversation_id for m in self._messages}
        if len(conversations) != 1:  # several conversations: their hits only
            return frozenset(hits)
        owner = self._messages[0].conversation.owner
        return frozenset(hits) | external_ids_unreadable(
            user=self.viewer, collection=default_collection(), readable_by=owner
        )

    @property
    def everything(self) -> bool:
        return self.access.everything

    def answer_hidden(self, *, answer: Message) -> bool:
        """Whether the answer was written from, or names, a document the viewer may not read."""
        if self.access.everything:
            return False
        if any(not self.source_readable(s.get("document_id")) for s in _sources(answer)):
            return True
        text = answer.text.casefold()
        return any(t.casefold() in text for t in self.titles)

    def _repeats_title(self, text: str) -> bool:
        folded = text.casefold()
        return any(t.casefold() in folded for t in self.titles)

    def derived_hidden(self, *, question: Message) -> bool:
        """Whether this turn's derived text (topic, rewritten queries, notes, clarification)
        may carry words of a document the viewer may not read."""
        return self._derived_from is not None and self._derived_from <= question.id

    def derived(self, text: str, *, question: Message) -> str:
        """Derived text of this turn as the viewer may see it: hidden whole, or scrubbed."""
        if text and self.derived_hidden(question=question):
            return str(RESTRICTED_PASSAGE)
        return self.scrub(text)

    def window_hidden(self, *, question: Message) -> bool:
        """Whether assistant text in this turn's window may repeat a hidden answer."""
        return self._hidden_from is not None and self._hidden_from < question.id

    # --- placeholders ---------------------------------------------------------------------

    def hit_readable(self, external_id: object) -> bool:
        return self.access.can_read(external_id=external_id)

    def hit_title(self, title: str, external_id: object) -> str:
        return self.access.title(title, external_id=external_id)

    def hit_document(self, external_id: str) -> str:
        return self.access.external_id(external_id)

    def source_title(self, title: str, document_id: object) -> str:
        return self.access.title(title, document_id=document_id)

    def source_readable(self, document_id: object) -> bool:
        return self.access.can_read(document_id=document_id)

    def window(self, *, question: Message, window: Iterable[TraceMessage]) -> list[TraceMessage]:
        """The masked window, with assistant text hidden after a hidden answer."""
        hide = self.window_hidden(question=question)
        return [
            replace(m, text=str(RESTRICTED_PASSAGE))
            if hide and m.role == "assistant"
            else replace(m, text=self.scrub(m.text))
            for m in window
        ]

    def scrub(self, text: str) -> str:
        """Text with every unreadable title of the conversation, and every unreadable
        document's id, replaced by the placeholder."""
        for name in sorted(self.titles | self._ids_hidden, key=len, reverse=True):
            if name and name.casefold() in text.casefold():
                text = replace_folded(text, name, str(RESTRICTED_DOCUMENT))
        return text

    def ranking(self, ranking: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """(external id, title) pairs, as the retry and marking pages list them."""
        return [(self.hit_document(d), self.hit_title(t, d)) for d, t in ranking]


def redactors_by_conversation(
    *, viewer: User, conversation_ids: Iterable[int]
) -> dict[int, TurnRedactor]:
    """One redactor per conversation, for a list page's rows (one query for their messages).

    Each row is scrubbed by its own conversation's redactor, never by one built over the
    whole page: a title retrieved in one conversation is no reason to touch words typed in
    another (that would tell the viewer which titles exist).
    """
    messages: dict[int, list[Message]] = {}
    for message in (
        Message.objects.filter(conversation_id__in=set(conversation_ids))
        .select_related("trace", "conversation__owner")
        .order_by("created_at", "id")
    ):
        messages.setdefault(message.conversation_id, []).append(message)
    return {cid: TurnRedactor(viewer=viewer, messages=ms) for cid, ms in messages.items()}


def ranking_redacted(*, viewer: User, ranking: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(external id, title) pairs of the chat's collection, placeholdered for this viewer."""
    access = document_access(
        user=viewer, collection=default_collection(), external_ids=[d for d, _ in ranking]
    )
    return [(access.external_id(d), access.title(t, external_id=d)) for d, t in ranking]
