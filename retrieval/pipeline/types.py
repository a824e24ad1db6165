"""Typed values that flow between the pipeline's steps (no I/O, no Django)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, Literal

Role = Literal["user", "assistant"]
QueryType = Literal["normalize", "expand", "decompose", "multi_query", "hyde", "original"]
QUERY_TYPES: tuple[QueryType, ...] = (
    "normalize",
    "expand",
    "decompose",
    "multi_query",
    "hyde",
    "original",
)

# One candidate line of a chunk (`answer.extractive.line_texts`) and its unit vector, as
# ingestion stored it (retrieval.models.ChunkLine).
LineVector = tuple[str, tuple[float, ...]]


class QueryVectors(Mapping[str, tuple[float, ...]]):
    """A turn's searched queries' unit vectors by query text; never changed once made.

    Hashed by identity, so that a turn's line similarities are computed once per passage
    and these vectors (`answer.line_similarity` caches them under the pair).
    """

    __slots__ = ("_vectors",)

    def __init__(self, vectors: Mapping[str, Sequence[float]] | None = None) -> None:
        self._vectors = {text: tuple(vector) for text, vector in (vectors or {}).items()}

    def __getitem__(self, text: str) -> tuple[float, ...]:
        return self._vectors[text]

    def __iter__(self) -> Iterator[str]:
        return iter(self._vectors)

    def __len__(self) -> int:
        return len(self._vectors)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"QueryVectors({list(self._vectors)!r})"


@dataclass(frozen=True)
class HistoryMessage:
    """One earlier message of the conversation (already masked)."""

    role: Role
    text: str


@dataclass(frozen=True)
class GlossaryEntry:
    """An admin-edited expansion of a company acronym or slang term."""

    term: str
    expansion: str
    area: str | None = None
    # The language of the turns it expands ("pt"); "" for every language. A term may have
    # one entry per language ("IRPF": Brazil's and Spain's income tax).
    language: str = ""


@dataclass(frozen=True)
class GlossaryHit:
    """A glossary term found in a text, with where it was found."""

    term: str
    expansion: str
    area: str | None = None
    source: Literal["question", "history"] = "question"


@dataclass(frozen=True)
class SearchQuery:
    """One self-contained search query produced for a turn."""

    text: str
    type: QueryType
    area: str | None = None
    # Relative weight when results of several queries are fused.
    weight: float = 1.0
    # For a follow-up, which reading of the turn the query is: the turn on its own
    # ("standalone") or with the conversation's topic ("contextual"). The search evidence
    # keeps one of the two (retrieval.pipeline.evidence).
    reading: Literal["standalone", "contextual"] | None = None


@dataclass(frozen=True)
class Clarification:
    """A question put back to the user when the turn is truly ambiguous."""

    question: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class LexiconView:
    """Corpus statistics for the words of one turn, fetched before a pure rewrite.

    Keys are normalised words (lower case, accents stripped). `df` holds how many
    chunks contain each word the corpus knows; a word absent from `df` is unknown.
    `corrections` maps unknown words to the closest known word (spelling fix).
    """

    df: Mapping[str, int] = field(default_factory=dict)
    n_chunks: int = 0
    corrections: Mapping[str, str] = field(default_factory=dict)
    # The turn's words that the language's own dictionary knows: never "corrected" into
    # another corpus word, and a glossary entry among them is an ordinary word too.
    language_words: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RewriteInput:
    """Everything a rewriter may look at: masked question, masked window, glossary."""

    question: str
    history: tuple[HistoryMessage, ...] = ()
    glossary: tuple[GlossaryEntry, ...] = ()
    max_queries: int = 3
    max_query_chars: int = 300
    today: date | None = None
    language: str | None = None  # "pt", "es", "en" or None when unknown
    # The collection's language, for a turn too short to tell its own ("node data").
    default_language: str | None = None
    # Messages of the conversation before the window: "voltando ao primeiro assunto" may
    # point at something the rewrite cannot see.
    earlier_messages: int = 0


BASELINE_POLICIES = frozenset({"none", "last-turn"})

# The rules that change the words a turn searches: a turn with nothing before it searches
# its words as typed (what the no-rewrite mode searches) unless one of these fired.
WORD_RULES = frozenset({"spelling", "glossary", "split", "drop_words", "place_names", "truncate"})
# The rules that decide a turn is not searched, or searched but not shown (it asks back).
DECISION_RULES = frozenset({"small_talk", "ask_pointer", "ask_out_of_sight", "ask_siblings"})
# Either kind: a first turn scored otherwise than under the no-rewrite mode names one of them.
SEARCH_RULES = WORD_RULES | DECISION_RULES


@dataclass(frozen=True)
class FiredRule:
    """A rule that changed the turn: its stable id (`carry_topic`, `spelling`, ...) and what
    it did, as the trace's note says it."""

    id: str
    detail: str


@dataclass(frozen=True)
class RewriteResult:
    """What a rewriter decided, with enough detail to show and audit it.

    Frozen: each rewriter builds it once (the rules from their draft,
    rewrite_rules.draft), and what the turn decides after it is a copy
    (`dataclasses.replace`, `with_rule`).
    """

    queries: list[SearchQuery]
    backend: str
    needs_clarification: bool = False
    clarification: Clarification | None = None
    # Why it asks: "pointer" (a pronoun with nothing before it), "out_of_sight" (the start
    # of the conversation is beyond the window), "siblings" (the search evidence).
    clarify_reason: str | None = None
    glossary_hits: list[GlossaryHit] = field(default_factory=list)
    corrections: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    anomalies: list[str] = field(default_factory=list)
    # Small talk ("obrigado!", "bom dia"): reply politely, search nothing, reopen no topic.
    # `small_talk` says which kind ("thanks", "greeting", "ack", "farewell", "chat").
    no_search: bool = False
    small_talk: str | None = None
    # The conversation's topic as carried words ("reembolso de despesas"): searched alone as
    # evidence of where the conversation is, never shown as a source.
    topic: str | None = None
    # Rare words (or glossary terms) of the turn that no earlier message has: a turn that
    # names something new may be a new topic.
    new_terms: tuple[str, ...] = ()
    # A short question with nothing to carry (how long a leave lasts, asked alone): its
    # content words, for the search evidence to tell whether its readings split across
    # sibling documents (then it asks back, naming them).
    clarify_terms: tuple[str, ...] = ()
    # What the search evidence decided between the readings, and why.
    decision: str | None = None
    # The user's own words as they may be searched: no placeholders, amounts or names.
    safe_original: str | None = None
    # Which version of which rewrite policy produced this ("rules-<hash>",
    # "llm/<model>/prompt-<hash>", "none"): traces, evaluations and a cache tell them apart.
    policy: str | None = None
    # Countries the turn places its question in ("no Uruguai", carried "en Chile"): their
    # pages are preferred over other countries' siblings (retrieval.pipeline.filters).
    countries: tuple[str, ...] = ()
    # Areas of the collection the turn places its question in ("no financeiro"): their
    # passages come first (retrieval.pipeline.filters.area_ask).
    areas: tuple[str, ...] = ()
    # "hit" when taken from the rewrite cache, "miss" when computed and kept, None without one.
    cache: str | None = None
    # The rules that fired, in order, by id: each also wrote its detail among `notes`.
    fired: list[FiredRule] = field(default_factory=list)

    def __post_init__(self) -> None:
        # The baselines (searching the words as typed, or joined to the last turn) have no
        # versions: each is its own policy.
        if self.policy is None and self.backend in BASELINE_POLICIES:
            object.__setattr__(self, "policy", self.backend)

    def with_rule(self, rule: str, detail: str, **changes: Any) -> RewriteResult:
        """This rewrite with `rule` fired after it (its detail also the trace's note) and
        `changes` made."""
        return replace(
            self,
            notes=[*self.notes, detail],
            fired=[*self.fired, FiredRule(rule, detail)],
            **changes,
        )

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict (for traces and WebSocket frames)."""
        return {
            "backend": self.backend,
            "model": self.model,
            "policy": self.policy,
            "queries": [
                {
                    "text": q.text,
                    "type": q.type,
                    "area": q.area,
                    "weight": q.weight,
                    "reading": q.reading,
                }
                for q in self.queries
            ],
            "needs_clarification": self.needs_clarification,
            "clarify_reason": self.clarify_reason,
            "clarification": (
                {
                    "question": self.clarification.question,
                    "options": list(self.clarification.options),
                }
                if self.clarification
                else None
            ),
            "glossary_hits": [
                {"term": h.term, "expansion": h.expansion, "area": h.area, "source": h.source}
                for h in self.glossary_hits
            ],
            "corrections": dict(self.corrections),
            "notes": list(self.notes),
            "rules": [{"id": r.id, "detail": r.detail} for r in self.fired],
            "error": self.error,
            "anomalies": list(self.anomalies),
            "no_search": self.no_search,
            "small_talk": self.small_talk,
            "topic": self.topic,
            "decision": self.decision,
            "countries": list(self.countries),
            "areas": list(self.areas),
            "cache": self.cache,
        }
