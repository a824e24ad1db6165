"""One turn in, one plan out: the pipeline's single entry point (no Django, no I/O of its own).

A caller (the chat, `evaluate`, `ask`, the playground, the promotion gate) builds a
`TurnRequest` with `retrieval.services.turn_request_for`, the backends with
`retrieval.services.turn_backends_for`, and calls `plan_turn`. The plan says what the turn
does, decided here once:

- `small_talk`: a short polite reply, nothing searched ("obrigado!");
- `ask_back`: a question back with its options, no sources shown;
- `answer`: the searches and passages the answer step (`respond.answer_turn`) works from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

from .llm import ChatModel
from .retrieve import (
    LexiconFetcher,
    QueryEmbedder,
    RetrievalOutcome,
    RetrievalSettings,
    RewriteAnnouncement,
    retrieve,
)
from .rewrite_cache import RewriteCache
from .rewrite_rules.smalltalk import small_talk_reply
from .search import Scope, Searcher
from .text import detect_language
from .tuning import DEFAULT_TUNING, Tuning, tuned
from .types import GlossaryEntry, HistoryMessage

PlanKind = Literal["small_talk", "ask_back", "answer"]


def turn_language(
    question: str,
    history: Sequence[HistoryMessage],
    *,
    explicit: str | None,
    default: str,
) -> str:
    """The language a turn is rewritten, searched and answered in.

    The one given (an evaluation task's), else the question's own, else the user's earlier
    words' ("node data" after a Portuguese conversation), else the collection's. The chat
    and the evaluation both decide it here (they used to differ: the chat skipped the
    earlier words, the evaluation passed none and let the rewriter guess).
    """
    if explicit:
        return explicit
    users = " ".join(m.text for m in history if m.role == "user")
    return detect_language(question) or detect_language(f"{users} {question}") or default


@dataclass(frozen=True)
class TurnRequest:
    """What one turn asks, as its reader, of one collection: built by one selector."""

    question: str
    history: tuple[HistoryMessage, ...]
    scope: Scope
    glossary: tuple[GlossaryEntry, ...]
    settings: RetrievalSettings
    # The language the turn is rewritten, searched and answered in (`turn_language`).
    language: str
    # The collection's language, for a rewrite that cannot tell the turn's.
    default_language: str
    # The reader's names, masked in the question and the window.
    known_names: tuple[str, ...] = ()
    # The areas of the documents the reader may read ("no financeiro" names one).
    areas: tuple[str, ...] = ()
    # The reader's local date ("a regra deste ano"): the pipeline keeps no clock.
    today: date | None = None
    # The decisions' thresholds (tuning.py): another file's in `evaluate --tuning`.
    tuning: Tuning = DEFAULT_TUNING


@dataclass(frozen=True)
class TurnBackends:
    """What a turn reads from and asks: the search, the embedder, the vocabulary, a model."""

    searcher: Searcher
    embedder: QueryEmbedder | None
    lexicon: LexiconFetcher
    model: ChatModel | None = None
    rewrite_cache: RewriteCache | None = None


@dataclass(frozen=True)
class TurnPlan:
    """What a turn does: reply to small talk, ask back, or answer from its passages."""

    kind: PlanKind
    language: str
    outcome: RetrievalOutcome
    # The reply a small-talk turn sends, or the question an ask-back turn puts.
    reply: str | None = None
    options: tuple[str, ...] = ()
    small_talk: str | None = None

    @property
    def searched(self) -> bool:
        """Whether the turn shows sources (an answer), not whether a search ran."""
        return self.kind == "answer"


def decide(outcome: RetrievalOutcome, language: str) -> TurnPlan:
    """The one place that tells small talk, ask back and answer apart."""
    rewrite = outcome.rewrite
    if rewrite.no_search and rewrite.small_talk:
        text = small_talk_reply(rewrite.small_talk, language)
        return TurnPlan("small_talk", language, outcome, text, small_talk=rewrite.small_talk)
    if rewrite.needs_clarification and rewrite.clarification is not None:
        asked = rewrite.clarification
        return TurnPlan("ask_back", language, outcome, asked.question, asked.options)
    return TurnPlan("answer", language, outcome)


async def plan_turn(
    request: TurnRequest,
    backends: TurnBackends,
    *,
    on_rewrite: Callable[[RewriteAnnouncement], Awaitable[None]] | None = None,
) -> TurnPlan:
    """Rewrite and search one turn and decide what it does, with the request's tuning."""
    with tuned(request.tuning):
        outcome = await _retrieve(request, backends, on_rewrite)
    return decide(outcome, request.language)


async def _retrieve(
    request: TurnRequest,
    backends: TurnBackends,
    on_rewrite: Callable[[RewriteAnnouncement], Awaitable[None]] | None,
) -> RetrievalOutcome:
    return await retrieve(
        question=request.question,
        history=request.history,
        glossary=request.glossary,
        scope=request.scope,
        engine=backends.searcher,
        embedder=backends.embedder,
        lexicon=backends.lexicon,
        settings=request.settings,
        model=backends.model,
        known_names=request.known_names,
        language=request.language,
        default_language=request.default_language,
        on_rewrite=on_rewrite,
        today=request.today,
        rewrite_cache=backends.rewrite_cache,
        areas=request.areas,
    )
