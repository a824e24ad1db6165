"""The turn trace: its JSON defined once, its flags, and the rewrite view of the pages.

A `TurnTrace` row keeps what the pipeline did as JSON (`rewrite`, `search`, `timings_ms`,
`masked_window`, `errors`). The frozen dataclasses below (`Trace` and its parts) are its one
typed definition:
- written by `trace_fields` (the only writer of a turn's trace: the turn, and its failure);
- read by `read_trace`, the only reader of the JSON, tolerating traces written before a field
  existed; pages, flags, filters and scripts take a `Trace`, never the JSON.
Dataclasses rather than TypedDicts: a TypedDict types the JSON but leaves every reader its own
`.get()` and its own defaults; a dataclass reads it once.

The stored `rewrite` is the pipeline's record of the rewrite, `RewriteResult.to_dict()`, kept
whole (the admin's cache filter and audits read fields no page shows); `TraceRewrite` reads
the part that pages show. The chat's [rewrite] block is built by `rewrite_view` and
`rewrite_block` for the live frame (`announced_block`, sent by `conversations.turn`) and for
the stored trace (`conversations.views.present`, `conversations.quality.review.timeline`)
alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy

from retrieval.pipeline.types import RewriteResult, SearchQuery

if TYPE_CHECKING:
    from conversations.models import TurnTrace
    from retrieval.pipeline.retrieve import RetrievalOutcome, RewriteAnnouncement

QUERY_TYPE_LABELS = {
    "normalize": gettext_lazy("reformulada"),
    "expand": gettext_lazy("expandida"),
    "decompose": gettext_lazy("decomposta"),
    "multi_query": gettext_lazy("variação"),
    "hyde": gettext_lazy("hipótese (HyDE)"),
    "original": gettext_lazy("suas palavras"),
}
BACKEND_LABELS = {
    "rules": gettext_lazy("regras e glossário"),
    "llm": gettext_lazy("modelo de linguagem"),
    "none": gettext_lazy("sem reescrita"),
    "last-turn": gettext_lazy("pergunta anterior + atual"),
}
# What each named rule did, in the page's language (retrieval's rule ids, docs/decisions.md):
# the trace shows the label, then the rule's own detail (the words it changed).
RULE_LABELS = {
    "small_talk": gettext_lazy("conversa: respondida sem buscar"),
    "spelling": gettext_lazy("ortografia corrigida"),
    "glossary": gettext_lazy("termo do glossário expandido"),
    "glossary_ordinary_word": gettext_lazy("palavra comum, não expandida"),
    "split": gettext_lazy("pergunta dividida em partes"),
    "drop_words": gettext_lazy("nome ou valor deixado fora da busca"),
    "place_names": gettext_lazy("país também nos outros idiomas"),
    "truncate": gettext_lazy("busca encurtada"),
    "carry_topic": gettext_lazy("assunto da conversa retomado"),
    "substitute": gettext_lazy("referência trocada pelo assunto"),
    "topic_swap": gettext_lazy("talvez outro assunto: buscado também"),
    "correction": gettext_lazy("correção da leitura: assunto anterior deixado de lado"),
    "return": gettext_lazy("volta a um assunto anterior"),
    "keep_as_asked": gettext_lazy("mantida como foi perguntada"),
    "nothing_to_carry": gettext_lazy("nada anterior a retomar"),
    "asks_definition": gettext_lazy("pergunta o que algo é: mantida"),
    "maybe_follow_up": gettext_lazy("talvez uma continuação"),
    "ask_pointer": gettext_lazy("refere-se a algo fora da conversa: perguntou de volta"),
    "ask_out_of_sight": gettext_lazy("início da conversa fora de vista: perguntou de volta"),
    "llm_fallback": gettext_lazy("o modelo falhou: regras usadas"),
    "new_topic": gettext_lazy("lida como assunto novo"),
    "follow_up": gettext_lazy("lida como continuação"),
    "both_readings": gettext_lazy("as duas leituras buscadas"),
    "country": gettext_lazy("país da pergunta"),
    "area": gettext_lazy("área da pergunta"),
    "reply_documents": gettext_lazy("páginas da resposta anterior"),
    "ask_siblings": gettext_lazy("páginas parecidas: perguntou qual"),
    "chosen_option": gettext_lazy("opção escolhida: buscada com a pergunta feita"),
    "version": gettext_lazy("versão vigente preferida"),
    "hyde": gettext_lazy("hipótese (HyDE)"),
    "rerank": gettext_lazy("reordenadas pelo modelo"),
    "rewrite_cache": gettext_lazy("reescrita reaproveitada"),
}
# Hits kept in a trace: enough for review, small enough for a row.
TRACE_HITS = 30

# A passage is corroborated when one query ranked it in the top STRONG_RANK of BOTH search
# legs: the words and the meaning agree. A turn where no hit is corroborated retrieved only
# what one leg guessed, the usual sign of a vocabulary gap (an unknown acronym, slang).
STRONG_RANK = 3
# jsonpath of a corroborated hit, for jsonb_path_exists (same rule as `FoundBy.corroborated`).
STRONG_PATH = (
    f"$.hits[*].found_by[*] ? (@.vector_rank <= {STRONG_RANK} && @.text_rank <= {STRONG_RANK})"
)
# Every flag, in the order pages show them; `conversations.quality.review.selectors.trace_flag_q`
# states each in SQL, and tests hold the two together.
FLAGS = (
    "no_results",
    "weak",
    "not_found",
    "clarified",
    "anomaly",
    "errors",
    "slow",
    "thumbs_down",
    "thumbs_up",
)


def _text(value: object) -> str:
    return str(value) if value is not None else ""


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _rank(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _dicts(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


# --- the trace's parts ----------------------------------------------------------------------


@dataclass(frozen=True)
class TraceQuery:
    """One query searched (masked text in a stored trace)."""

    text: str
    type: str
    weight: float | None = None
    area: str = ""
    # A follow-up's reading ("standalone", "contextual"), or "" (traces from before it was kept)
    reading: str = ""

    @classmethod
    def of(cls, query: SearchQuery, *, text: str | None = None) -> TraceQuery:
        text = query.text if text is None else text
        return cls(text, query.type, query.weight, query.area or "", query.reading or "")

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> TraceQuery:
        text, kind = _text(data.get("text")), _text(data.get("type"))
        area, reading = _text(data.get("area")), _text(data.get("reading"))
        return cls(text, kind, _number(data.get("weight")), area, reading)

    def json(self) -> dict[str, Any]:
        # `area` None, not "", in the JSON: what the trace always stored; `reading` only when
        # the query has one.
        area = self.area or None
        stored = {"text": self.text, "type": self.type, "weight": self.weight, "area": area}
        return {**stored, "reading": self.reading} if self.reading else stored


@dataclass(frozen=True)
class FoundBy:
    """How one query found a hit: its fused rank and each leg's rank (None: not found)."""

    query: int  # index into the searched queries, from 0
    rank: int
    vector_rank: int | None
    text_rank: int | None
    score: float

    @property
    def corroborated(self) -> bool:
        """Ranked high by both the vector and the full-text leg (see `STRONG_RANK`)."""
        if self.vector_rank is None or self.text_rank is None:
            return False
        return max(self.vector_rank, self.text_rank) <= STRONG_RANK

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> FoundBy:
        return cls(
            query=_rank(data.get("query")) or 0,
            rank=_rank(data.get("rank")) or 0,
            vector_rank=_rank(data.get("vector_rank")),
            text_rank=_rank(data.get("text_rank")),
            score=_number(data.get("score")) or 0.0,
        )

    def json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "rank": self.rank,
            "vector_rank": self.vector_rank,
            "text_rank": self.text_rank,
            "score": self.score,
        }


@dataclass(frozen=True)
class TraceHit:
    """One fused hit: its chunk, its document (external id), and who found it."""

    chunk: int
    document: str
    title: str
    score: float
    found_by: tuple[FoundBy, ...] = ()

    @property
    def corroborated(self) -> bool:
        return any(f.corroborated for f in self.found_by)

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> TraceHit:
        return cls(
            chunk=_rank(data.get("chunk")) or 0,
            document=_text(data.get("document")),
            title=_text(data.get("title")),
            score=_number(data.get("score")) or 0.0,
            found_by=tuple(FoundBy.read(f) for f in _dicts(data.get("found_by"))),
        )

    def json(self) -> dict[str, Any]:
        return {
            "chunk": self.chunk,
            "document": self.document,
            "title": self.title,
            "score": self.score,
            "found_by": [f.json() for f in self.found_by],
        }


@dataclass(frozen=True)
class TraceStage:
    """What an optional model stage did (`retrieval.pipeline.model_stages`): "done", "kept"
    (the rerank left the fused order), "failed" or "skipped", why, and how long it took.

    A rerank also keeps the window's chunk ids in the fused order (`before`) and in the final
    order (`after`): ids only, so the trace names no document the hits do not already name.
    """

    status: str
    reason: str = ""
    model: str = ""
    ms: float | None = None
    before: tuple[int, ...] = ()
    after: tuple[int, ...] = ()

    @classmethod
    def read(cls, data: object) -> TraceStage | None:
        if not isinstance(data, Mapping) or not _text(data.get("status")):
            return None
        return cls(
            status=_text(data.get("status")),
            reason=_text(data.get("reason")),
            model=_text(data.get("model")),
            ms=_number(data.get("ms")),
            before=_ints(data.get("before")),
            after=_ints(data.get("after")),
        )

    def json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "model": self.model,
            "ms": self.ms,
            "before": list(self.before),
            "after": list(self.after),
        }


def _ints(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))


@dataclass(frozen=True)
class TraceSearch:
    """What was searched (the user's own words last), what came back, what was shown."""

    queries: tuple[TraceQuery, ...] = ()
    hits: tuple[TraceHit, ...] = ()  # the best TRACE_HITS fused hits, best first
    passages: tuple[int, ...] = ()  # chunk ids of the passages shown
    # The optional model stages, when switched on (a "hyde" query is the hypothesis itself).
    hyde: TraceStage | None = None
    rerank: TraceStage | None = None

    @property
    def corroborated(self) -> bool:
        """Some hit was ranked high by both legs (`STRONG_PATH` in SQL)."""
        return any(h.corroborated for h in self.hits)

    def ranking(self) -> list[tuple[str, str]]:
        """The documents retrieved, best first: (external id, title)."""
        seen: dict[str, str] = {}
        for hit in self.hits:
            seen.setdefault(hit.document, hit.title)
        return list(seen.items())

    @classmethod
    def of(cls, outcome: RetrievalOutcome) -> TraceSearch:
        return cls(
            queries=tuple(TraceQuery.of(q) for q in outcome.queries),
            hits=tuple(
                TraceHit(
                    chunk=m.hit.chunk_id,
                    document=m.hit.external_id,
                    title=m.hit.title,
                    score=round(m.score, 6),
                    found_by=tuple(
                        FoundBy(x.query, x.rank, x.vector_rank, x.text_rank, x.score)
                        for x in m.matches
                    ),
                )
                for m in outcome.merged[:TRACE_HITS]
            ),
            passages=tuple(m.hit.chunk_id for m in outcome.passages),
            hyde=TraceStage.read(outcome.hyde.to_dict()) if outcome.hyde else None,
            rerank=TraceStage.read(outcome.rerank.to_dict()) if outcome.rerank else None,
        )

    @classmethod
    def read(cls, data: object) -> TraceSearch:
        if not isinstance(data, Mapping):
            return cls()
        passages = data.get("passages")
        return cls(
            queries=tuple(TraceQuery.read(q) for q in _dicts(data.get("queries"))),
            hits=tuple(TraceHit.read(h) for h in _dicts(data.get("hits"))),
            passages=tuple(p for p in passages if isinstance(p, int))
            if isinstance(passages, list)
            else (),
            hyde=TraceStage.read(data.get("hyde")),
            rerank=TraceStage.read(data.get("rerank")),
        )

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "queries": [q.json() for q in self.queries],
            "hits": [h.json() for h in self.hits],
            "passages": list(self.passages),
        }
        # Only when a stage was switched on: traces without them keep their shape.
        if self.hyde is not None:
            out["hyde"] = self.hyde.json()
        if self.rerank is not None:
            out["rerank"] = self.rerank.json()
        return out


@dataclass(frozen=True)
class TraceGlossaryHit:
    term: str
    expansion: str
    source: str = ""  # "question" or "history" (where the term was found)


@dataclass(frozen=True)
class TraceClarification:
    """The question asked back, with the options offered."""

    question: str
    options: tuple[str, ...] = ()

    def json(self) -> dict[str, Any]:
        return {"question": self.question, "options": list(self.options)}


@dataclass(frozen=True)
class TraceRewrite:
    """What the rewrite decided, as pages show it (the stored JSON is `to_dict()` whole)."""

    backend: str = ""
    model: str = ""
    policy: str = ""  # the rewrite policy's version; empty on traces from before it was kept
    cache: str = ""  # "hit" (taken from the rewrite cache), "miss", or "" without one
    queries: tuple[TraceQuery, ...] = ()  # as rewritten, before the user's words joined them
    glossary: tuple[TraceGlossaryHit, ...] = ()
    corrections: tuple[tuple[str, str], ...] = ()  # (typed, corrected), sorted
    notes: tuple[str, ...] = ()
    rules: tuple[tuple[str, str], ...] = ()  # (rule id, its detail), in the order they fired
    anomalies: tuple[str, ...] = ()
    clarification: TraceClarification | None = None  # only when it asked back
    error: str = ""  # why the rewrite fell back, if it did
    no_search: bool = False  # small talk: nothing was to be searched
    topic: str = ""  # the conversation's topic as carried words, when a follow-up had one

    @classmethod
    def of(cls, rewrite: RewriteResult) -> TraceRewrite:
        """The live rewrite, read the way a stored one is (through its JSON)."""
        return cls.read(rewrite.to_dict())

    @classmethod
    def read(cls, data: object) -> TraceRewrite:
        if not isinstance(data, Mapping):
            return cls()
        clarification = data.get("clarification") if data.get("needs_clarification") else None
        corrections = data.get("corrections")
        return cls(
            backend=_text(data.get("backend")),
            model=_text(data.get("model")),
            policy=_text(data.get("policy")),
            cache=_text(data.get("cache")),
            queries=tuple(TraceQuery.read(q) for q in _dicts(data.get("queries"))),
            glossary=tuple(
                TraceGlossaryHit(
                    _text(h.get("term")), _text(h.get("expansion")), _text(h.get("source"))
                )
                for h in _dicts(data.get("glossary_hits"))
            ),
            corrections=tuple(
                sorted((str(k), str(v)) for k, v in corrections.items())
                if isinstance(corrections, Mapping)
                else ()
            ),
            notes=_strings(data.get("notes")),
            rules=tuple(
                (_text(r.get("id")), _text(r.get("detail"))) for r in _dicts(data.get("rules"))
            ),
            anomalies=_strings(data.get("anomalies")),
            clarification=TraceClarification(
                _text(clarification.get("question")), _strings(clarification.get("options"))
            )
            if isinstance(clarification, Mapping)
            else None,
            error=_text(data.get("error")),
            no_search=data.get("no_search") is True,
            topic=_text(data.get("topic")),
        )


@dataclass(frozen=True)
class TraceMessage:
    """A message of the window the rewrite saw (masked)."""

    role: str
    text: str


@dataclass(frozen=True)
class TraceAnswerLine:
    """One line the extractive answer quoted: its card, score and the searched words it says."""

    n: int
    score: float
    page_rank: int
    says: tuple[str, ...]
    # The line model's features that weighed most, with what each added (names only).
    features: tuple[tuple[str, float], ...] = ()


def _features(value: object) -> tuple[tuple[str, float], ...]:
    """A stored line's `[[name, value], ...]`; anything else is left out."""
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
            number = _number(item[1])
            if number is not None:
                out.append((item[0], number))
    return tuple(out)


@dataclass(frozen=True)
class TraceAnswer:
    """Who wrote a turn's answer and why its lines (`Answer.why(with_text=False)`)."""

    kind: str = ""
    not_found: bool = False
    coverage: float | None = None
    lines: tuple[TraceAnswerLine, ...] = ()

    @classmethod
    def read(cls, data: object) -> TraceAnswer:
        if not isinstance(data, Mapping):
            return cls()
        return cls(
            kind=_text(data.get("kind")),
            not_found=bool(data.get("not_found")),
            coverage=_number(data.get("coverage")),
            lines=tuple(
                TraceAnswerLine(
                    n=int(_number(line.get("n")) or 0),
                    score=_number(line.get("score")) or 0.0,
                    page_rank=int(_number(line.get("page_rank")) or 0),
                    says=_strings(line.get("says")),
                    features=_features(line.get("features")),
                )
                for line in _dicts(data.get("lines"))
            ),
        )


@dataclass(frozen=True)
class Trace:
    """One turn's stored trace, typed (masked text only)."""

    masked_question: str = ""
    masked_window: tuple[TraceMessage, ...] = ()
    rewrite: TraceRewrite = field(default_factory=TraceRewrite)
    search: TraceSearch = field(default_factory=TraceSearch)
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    anomaly: bool = False
    clarified: bool = False
    no_results: bool = False
    answer: TraceAnswer = field(default_factory=lambda: TraceAnswer())

    @property
    def searched(self) -> tuple[TraceQuery, ...]:
        """The queries searched; traces from before the search was kept have the rewrite's."""
        return self.search.queries or self.rewrite.queries

    @property
    def total_ms(self) -> float | None:
        """Milliseconds from the message's arrival to the end of its answer, when known."""
        return self.timings_ms.get("to_done")

    @property
    def found_nothing(self) -> bool:
        """A search ran and brought back nothing to show.

        Small talk ("obrigado!") searches nothing and shows no sources on purpose: its
        stored `no_results` is no failure, and puts no turn on the staff's panel.
        """
        return self.no_results and not self.rewrite.no_search

    @property
    def weak(self) -> bool:
        """Results came back, but none is backed by both search legs."""
        if self.clarified or self.no_results or not self.search.hits:
            return False
        return not self.search.corroborated


def trace_fields(outcome: RetrievalOutcome | None, errors: Sequence[str]) -> dict[str, Any]:
    """The fields of a turn's `TurnTrace` row: the one writer of its JSON.

    Without an outcome (the turn failed before its search), only the errors.
    """
    fields: dict[str, Any] = {"errors": list(errors)}
    if outcome is not None:
        fields.update(
            masked_question=outcome.masked_question,
            masked_window=[{"role": m.role, "text": m.text} for m in outcome.masked_window],
            rewrite=outcome.rewrite.to_dict(),
            search=TraceSearch.of(outcome).json(),
            timings_ms=dict(outcome.timings_ms),
            anomaly=bool(outcome.rewrite.anomalies),
            clarified=outcome.rewrite.needs_clarification,
            no_results=not outcome.passages,
        )
    return fields


def trace_with_timings(
    fields: dict[str, Any], timings: Mapping[str, float], errors: Sequence[str] = ()
) -> dict[str, Any]:
    """A trace's fields (`trace_fields`) with the turn's frame timings and these errors added."""
    return {
        **fields,
        "timings_ms": {**fields.get("timings_ms", {}), **timings},
        "errors": list(dict.fromkeys([*fields["errors"], *errors])),
    }


def read_trace(row: TurnTrace) -> Trace:
    """A stored trace, typed: the one reader of its JSON."""
    timings = row.timings_ms if isinstance(row.timings_ms, Mapping) else {}
    return Trace(
        masked_question=row.masked_question or "",
        masked_window=tuple(
            TraceMessage(_text(m.get("role")), _text(m.get("text")))
            for m in _dicts(row.masked_window)
        ),
        rewrite=TraceRewrite.read(row.rewrite),
        search=TraceSearch.read(row.search),
        timings_ms={k: v for k, n in timings.items() if (v := _number(n)) is not None},
        errors=_strings(row.errors),
        anomaly=bool(row.anomaly),
        clarified=bool(row.clarified),
        no_results=bool(row.no_results),
        answer=TraceAnswer.read(row.answer),
    )


# --- flags ----------------------------------------------------------------------------------


def turn_flags(trace: Trace, *, slow_ms: float, thumbs_down: bool, thumbs_up: bool) -> list[str]:
    """The flags of one turn, in `FLAGS` order (`selectors.trace_flag_q` states them in SQL).

    Feedback is not in the trace: it is given on the answer, later.
    """
    total = trace.total_ms
    raised = {
        "no_results": trace.found_nothing,
        "weak": trace.weak,
        # The extractive answer said the pages found don't hold what was asked.
        "not_found": trace.answer.not_found,
        "clarified": trace.clarified,
        "anomaly": trace.anomaly,
        "errors": bool(trace.errors),
        "slow": total is not None and total > slow_ms,
        "thumbs_down": thumbs_down,
        "thumbs_up": thumbs_up,
    }
    return [flag for flag in FLAGS if raised[flag]]


# --- the rewrite, as the pages show it ------------------------------------------------------


@dataclass
class QueryView:
    """One query searched, numbered from 1."""

    number: int
    text: str
    type: str
    type_label: str
    weight: float | None
    area: str
    reading: str = ""


@dataclass
class RewriteView:
    """What the rewrite decided and what was searched (mutable: review pages placeholder it)."""

    backend: str = ""
    backend_label: str = ""
    model: str = ""
    policy: str = ""
    queries: list[QueryView] = field(default_factory=list)
    glossary: list[TraceGlossaryHit] = field(default_factory=list)
    corrections: list[tuple[str, str]] = field(default_factory=list)  # (typed, corrected)
    notes: list[str] = field(default_factory=list)  # every note, the rules' details among them
    rules: list[tuple[str, str]] = field(default_factory=list)  # (rule id, detail)
    anomalies: list[str] = field(default_factory=list)
    clarification: TraceClarification | None = None
    error: str = ""


def rewrite_view(rewrite: TraceRewrite, searched: Sequence[TraceQuery]) -> RewriteView:
    """The rewrite and the queries searched, as the chat's [rewrite] block and the staff
    timeline show them: live (`searched` unmasked) or stored (`Trace.searched`, masked)."""
    return RewriteView(
        backend=rewrite.backend,
        backend_label=str(BACKEND_LABELS.get(rewrite.backend, rewrite.backend)),
        model=rewrite.model,
        policy=rewrite.policy,
        queries=[
            QueryView(
                number=i,
                text=q.text,
                type=q.type,
                type_label=str(QUERY_TYPE_LABELS.get(q.type, q.type)),
                weight=q.weight,
                area=q.area,
                reading=q.reading,
            )
            for i, q in enumerate(searched, start=1)
        ],
        glossary=list(rewrite.glossary),
        corrections=list(rewrite.corrections),
        notes=list(rewrite.notes),
        rules=list(rewrite.rules),
        anomalies=list(rewrite.anomalies),
        clarification=rewrite.clarification,
        error=rewrite.error,
    )


def announced_block(announced: RewriteAnnouncement, *, original: str) -> dict[str, Any]:
    """The live [rewrite] block of a turn, built as the stored trace's is, with the queries
    in the user's own words (the stored ones stay masked)."""
    unmask = announced.masker.unmask
    view = rewrite_view(
        TraceRewrite.of(announced.rewrite),
        [TraceQuery.of(q, text=unmask(q.text)) for q in announced.queries],
    )
    return rewrite_block(view, original=original, errors=announced.errors)


def rewrite_block(view: RewriteView, *, original: str, errors: Sequence[str]) -> dict[str, Any]:
    """The chat's [rewrite] block as JSON: the live `rewrite` frame's body, and the stored
    trace's on the chat page (`conversations.views.present.trace_view`).

    No labels: the page translates types and backends itself (`chat_labels`).
    """
    rule_details = {detail for _, detail in view.rules}
    return {
        "original": original,
        "backend": view.backend,
        "model": view.model,
        "queries": [
            {"text": q.text, "type": q.type, "weight": q.weight, "area": q.area}
            for q in view.queries
        ],
        "glossary": [{"term": g.term, "expansion": g.expansion} for g in view.glossary],
        "corrections": dict(view.corrections),
        # The named rules (the page shows each by its translated label, then its detail),
        # and the notes no rule wrote.
        "rules": [{"id": rule, "detail": detail} for rule, detail in view.rules],
        "notes": [n for n in view.notes if n not in rule_details],
        "anomalies": list(view.anomalies),
        "clarification": view.clarification.json() if view.clarification else None,
        "errors": list(errors),
    }
