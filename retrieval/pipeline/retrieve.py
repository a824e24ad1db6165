"""Rewrite a turn and run its searches: the retrieval half of a turn, shared by chat and evaluation.

mask → rewrite (none | last-turn | rules | llm, falling back to rules) → embed all queries
in one batch → hybrid searches in parallel (the original question always included, at low
weight) → merge. Every step is timed and nothing here raises for a model or rewrite failure:
the worst case searches the user's own words.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, Literal, Protocol, runtime_checkable

from .answer.grounded import LineVectors, context_chunk_ids
from .ask_back import evidence_ask_back
from .asks import without_asking_words
from .dictionary import known_words
from .evidence import choose_reading, favour_reply_documents, reply_probe
from .filters import (
    area_ask,
    prefer_areas,
    prefer_countries,
    prefer_current,
    prefer_named_titles,
    turn_countries,
    version_ask,
)
from .fusion import FusionStrategy, Hit, MergedHit, cut_passages, merge_results
from .glossary import find_glossary_hits
from .llm import ChatModel
from .masking import Masker, MaskingConfig
from .model_stages import (
    HydeRecord,
    HydeSettings,
    RerankRecord,
    RerankSettings,
    hyde_stage,
    rerank_stage,
)
from .rewrite_cache import RewriteCache, cache_key, from_state, to_state
from .rewrite_llm import llm_policy, rewrite_with_llm
from .rewrite_rules import lexicon_words, rewrite_with_rules, tuned_policy
from .search import (
    Scope,
    SearchCancelled,
    Searcher,
    SearchParams,
    SearchRequest,
    cancellable,
    unit_vector,
)
from .text import content_terms, detect_language, normalize, token_spans
from .tuning import tuning
from .types import (
    FiredRule,
    HistoryMessage,
    LexiconView,
    QueryVectors,
    RewriteInput,
    RewriteResult,
    SearchQuery,
)

RewriteMode = Literal["none", "last-turn", "rules", "llm"]
REWRITE_MODES: tuple[RewriteMode, ...] = ("none", "last-turn", "rules", "llm")


class QueryEmbedder(Protocol):
    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class PassageEmbedder(Protocol):
    """An embedder that also embeds passages: a hypothetical answer is embedded as one."""

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]: ...


@dataclass(frozen=True)
class RetrievalSettings:
    mode: RewriteMode = "rules"
    window: int = 6
    max_queries: int = 3
    max_query_chars: int = 300
    # Fusion weight per query type; the user's own words weigh less than a good rewrite and a
    # hypothetical answer (HyDE) less than a query (Onyx uses 1.3 / 1.0 / 0.5 likewise).
    query_weights: Mapping[str, float] = field(
        default_factory=lambda: {
            "normalize": 1.0,
            "expand": 1.0,
            "decompose": 1.0,
            "multi_query": 1.0,
            "hyde": 0.7,
            "original": 0.5,
        }
    )
    fusion: FusionStrategy = "rrf"
    rrf_k: int = 60
    passages: int = 6
    max_per_document: int = 2
    rewrite_timeout: float = 8.0
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    search: SearchParams = field(default_factory=SearchParams)
    # The optional model stages (model_stages.py): None is off, the default.
    hyde: HydeSettings | None = None
    rerank: RerankSettings | None = None


@dataclass(frozen=True)
class RetrievalOutcome:
    """Everything the answer step and the trace need (a decided turn: never changed)."""

    masked_question: str
    masked_window: list[HistoryMessage]
    rewrite: RewriteResult
    queries: list[SearchQuery]  # what was searched, the original last
    merged: list[MergedHit]  # all fused hits, best first
    passages: list[MergedHit]  # the cut shown to the user and the model
    timings_ms: dict[str, float]
    errors: list[str]
    masker: Masker
    # The page a version, country or company-term preference put first; the answer keeps it.
    pinned: str | None = None
    # What the optional model stages did (None: switched off).
    hyde: HydeRecord | None = None
    rerank: RerankRecord | None = None
    # The searched queries' unit vectors by query text (the ones `queries` still holds, a
    # hypothetical answer's left out), and the found chunks' stored line vectors by chunk
    # id (the chunks `context_passages` reads): the answer's semantic line feature
    # (`answer.line_similarity`) embeds nothing of its own.
    query_vectors: QueryVectors = field(default_factory=QueryVectors)
    line_vectors: LineVectors = field(default_factory=dict)


LexiconFetcher = Callable[[set[str]], LexiconView]


@dataclass(frozen=True)
class RewriteAnnouncement:
    """What a turn will search, known before the searches run."""

    rewrite: RewriteResult
    queries: list[SearchQuery]
    masker: Masker
    errors: list[str]


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


def _baseline_rewrite(inp: RewriteInput, mode: RewriteMode) -> RewriteResult:
    if mode == "last-turn":
        previous = next((m.text for m in reversed(inp.history) if m.role == "user"), "")
        text = f"{previous} {inp.question}".strip()
        return RewriteResult(queries=[SearchQuery(text, "expand")], backend="last-turn")
    return RewriteResult(queries=[SearchQuery(inp.question, "normalize")], backend="none")


def search_queries(
    rewrite: RewriteResult, original: str, weights: Mapping[str, float]
) -> list[SearchQuery]:
    """The rewritten queries, weighted by type, plus the user's own words as a safety net.

    The user's words are searched as the rewriter cleaned them (no placeholders, amounts or
    names) when it did; a small-talk turn searches nothing.
    """
    if rewrite.no_search:
        return []
    if rewrite.backend in {"none", "last-turn"}:
        return list(rewrite.queries)
    original = rewrite.safe_original if rewrite.safe_original is not None else original
    queries = [replace(q, weight=weights.get(q.type, q.weight)) for q in rewrite.queries]
    if not original.strip() or any(normalize(q.text) == normalize(original) for q in queries):
        return queries
    readings = {q.reading for q in queries}
    if "contextual" in readings and "standalone" not in readings:
        # A turn that points back ("e para quem é PJ?") is read with its topic only: the
        # evidence never keeps the user's words alone there (evidence.choose_reading), so
        # embedding and searching them would be wasted.
        return queries
    only = queries[0] if len(queries) == 1 else None
    bare = _words(_EXPANSIONS.sub("", only.text)) if only and only.type == "expand" else None
    if bare is not None and bare == _words(original):
        # The query is the user's words with the glossary's expansions beside them ("a PLR
        # (participação nos lucros e resultados) desse ano"): the bare acronym searched
        # again only pulled other pages up (ptes-dev MRR@10 .901 -> .913).
        return queries
    return [*queries, SearchQuery(original, "original", weight=weights.get("original", 0.5))]


_EXPANSIONS = re.compile(r"\s*\([^()]*\)")  # a glossary expansion beside its term


def _words(text: str) -> list[str]:
    return [t.norm for t in token_spans(text)]


# The rule that fired when the search evidence kept a follow-up's reading.
_READING_RULES = {"standalone": "new_topic", "contextual": "follow_up", "both": "both_readings"}


def _decide_reading(
    rewrite: RewriteResult,
    queries: list[SearchQuery],
    results: list[list[Hit]],
    topic_hits: list[Hit] | None,
    language: str | None,
) -> tuple[list[SearchQuery], list[list[Hit]], str | None, str | None]:
    """Keep the reading of a follow-up that the search evidence supports (see evidence.py),
    with why and which (None: nothing to decide)."""
    decision = choose_reading(
        queries, results, topic_hits, rewrite.new_terms, rewrite.topic, language
    )
    if decision.reading is None:
        return queries, results, None, None
    kept = [
        replace(q, weight=q.weight * decision.standalone_weight) if q.reading == "standalone" else q
        for q in (queries[i] for i in decision.keep)
    ]
    return kept, [results[i] for i in decision.keep], decision.reason, decision.reading


@dataclass
class _Turn:
    """One turn on its way through `retrieve`: what each step adds, and its notes.

    The rewriter's result is never changed: `rewrite()` is it with what the search evidence
    and the filters decided since (`dataclasses.replace`).
    """

    masked_question: str
    window: list[HistoryMessage]
    masker: Masker
    language: str | None
    rewritten: RewriteResult
    # Nothing before the turn: the follow-ups' evidence (the topic and reply probes, the
    # choice between readings) has nothing to weigh and stays off.
    first: bool = False
    queries: list[SearchQuery] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    fired: list[FiredRule] = field(default_factory=list)
    changes: dict[str, Any] = field(default_factory=dict)
    hyde: HydeRecord | None = None
    # The searched queries' unit vectors by text (a hypothetical answer's left out).
    vectors: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def fire(self, rule: str, detail: str) -> None:
        """Record that `rule` fired on the turn, with its detail (the trace's note)."""
        self.fired.append(FiredRule(rule, detail))

    def rewrite(self) -> RewriteResult:
        notes = [*self.rewritten.notes, *(r.detail for r in self.fired)]
        fired = [*self.rewritten.fired, *self.fired]
        return replace(self.rewritten, notes=notes, fired=fired, **self.changes)


@dataclass(frozen=True)
class _Found:
    """The queries' hits, and the two probes' (None: not searched)."""

    results: list[list[Hit]]
    topic_hits: list[Hit] | None
    reply_hits: list[Hit] | None


async def retrieve(
    *,
    question: str,
    history: Sequence[HistoryMessage],
    glossary: Sequence[Any],
    scope: Scope,
    engine: Searcher,
    embedder: QueryEmbedder | None,
    lexicon: LexiconFetcher,
    settings: RetrievalSettings,
    model: ChatModel | None = None,
    known_names: Sequence[str] = (),
    language: str | None = None,
    default_language: str | None = None,
    on_rewrite: Callable[[RewriteAnnouncement], Awaitable[None]] | None = None,
    today: date | None = None,
    rewrite_cache: RewriteCache | None = None,
    areas: Sequence[str] = (),
) -> RetrievalOutcome:
    """Rewrite and search one turn; degrade to searching the question as typed on failure.

    `today` is the reader's local date ("a regra deste ano"); the callers pass it in, so the
    pipeline keeps no clock of its own. `areas` are the areas of the documents the reader may
    read: one the turn names ("no financeiro") puts its passages first.
    """
    turn = await _rewritten(
        question=question,
        history=history,
        glossary=glossary,
        scope=scope,
        lexicon=lexicon,
        settings=settings,
        model=model,
        known_names=known_names,
        language=language,
        default_language=default_language,
        today=today,
        rewrite_cache=rewrite_cache,
    )
    if settings.hyde is not None:
        await _hyde_step(turn, model, settings)
    found = await _searched(turn, scope, engine, embedder, settings)
    found = _filters(turn, found, areas)
    if on_rewrite is not None:
        await on_rewrite(
            RewriteAnnouncement(turn.rewrite(), turn.queries, turn.masker, list(turn.errors))
        )
    t = time.perf_counter()
    merged, pinned, rerank = await _ranked(turn, found, model, settings, today)
    passages = cut_passages(
        merged, limit=settings.passages, max_per_document=settings.max_per_document
    )
    _ask_back_step(turn, merged, found)
    # The rerank's model call has its own line: "merge" is the fusion and the preferences.
    turn.timings["merge"] = round(_ms(t) - turn.timings.get("rerank", 0.0), 2)
    query_vectors = QueryVectors(
        {q.text: turn.vectors[q.text] for q in turn.queries if q.text in turn.vectors}
    )
    lines = await _line_vectors(turn, scope, engine, passages, merged) if query_vectors else {}
    return RetrievalOutcome(
        masked_question=turn.masked_question,
        masked_window=turn.window,
        rewrite=turn.rewrite(),
        queries=turn.queries,
        merged=merged,
        passages=passages,
        timings_ms=turn.timings,
        errors=turn.errors,
        masker=turn.masker,
        pinned=pinned,
        hyde=turn.hyde,
        rerank=rerank,
        query_vectors=query_vectors,
        line_vectors=lines,
    )


async def _line_vectors(
    turn: _Turn,
    scope: Scope,
    engine: Searcher,
    passages: Sequence[MergedHit],
    merged: Sequence[MergedHit],
) -> LineVectors:
    """The stored line vectors of the chunks the answer reads (one statement, under the
    reader's permission); none when it fails: the answer goes on without them."""
    if not passages or turn.rewritten.no_search:
        return {}
    started = time.perf_counter()
    ids = context_chunk_ids(passages, merged)
    try:
        found = await cancellable(lambda call: engine.line_vectors(ids, scope, call=call))
    except SearchCancelled:
        raise
    except Exception as exc:  # the answer's lines are still chosen, without this feature
        turn.errors.append(f"line vectors failed: {exc.__class__.__name__}")
        found = {}
    turn.timings["lines"] = _ms(started)
    return found


def _ask_back_step(turn: _Turn, merged: Sequence[MergedHit], found: _Found) -> None:
    """Ask back where the pages found show the turn's readings split (ask_back.py)."""
    asked = evidence_ask_back(
        turn.rewrite(),
        turn.queries,
        merged,
        found.reply_hits or [],
        turn.window,
        turn.masked_question,
        turn.language,
    )
    if asked is not None:
        turn.changes.update(
            needs_clarification=True,
            clarify_reason=asked.reason,
            clarification=asked.clarification,
        )
        if asked.note:
            turn.fire("ask_siblings", asked.note)


async def _rewritten(
    *,
    question: str,
    history: Sequence[HistoryMessage],
    glossary: Sequence[Any],
    scope: Scope,
    lexicon: LexiconFetcher,
    settings: RetrievalSettings,
    model: ChatModel | None,
    known_names: Sequence[str],
    language: str | None,
    default_language: str | None,
    today: date | None,
    rewrite_cache: RewriteCache | None,
) -> _Turn:
    """Mask the question and the window, rewrite, and list the queries to search."""
    timings: dict[str, float] = {}
    errors: list[str] = []
    t = time.perf_counter()
    masking = MaskingConfig(
        employee_id_pattern=settings.masking.employee_id_pattern,
        known_names=tuple(known_names),
        mask_money=settings.masking.mask_money,
    )
    masker = Masker(masking)

    def masked() -> tuple[str, list[HistoryMessage]]:
        kept = history[-settings.window :] if settings.window else []
        return masker.mask(question), [HistoryMessage(m.role, masker.mask(m.text)) for m in kept]

    # Off the event loop, like every CPU-bound step of a turn: a long message must not hold
    # the other users' turns (issue 38, finding 2).
    masked_question, window = await asyncio.to_thread(masked)
    timings["mask"] = _ms(t)
    inp = RewriteInput(
        question=masked_question,
        history=tuple(window),
        glossary=tuple(glossary),
        max_queries=settings.max_queries,
        max_query_chars=settings.max_query_chars,
        today=today,
        language=language,
        default_language=default_language,
        earlier_messages=max(0, len(history) - len(window)),
    )
    t = time.perf_counter()
    rewrite = await _cached_rewrite(inp, settings, lexicon, model, errors, scope, rewrite_cache)
    timings["rewrite"] = _ms(t)
    return _Turn(
        masked_question=masked_question,
        window=window,
        masker=masker,
        language=language or detect_language(masked_question) or default_language,
        rewritten=rewrite,
        first=not history,
        queries=search_queries(rewrite, masked_question, settings.query_weights),
        timings=timings,
        errors=errors,
    )


async def _hyde_step(turn: _Turn, model: ChatModel | None, settings: RetrievalSettings) -> None:
    """Add a hypothetical answer to the turn's queries (model_stages.py), and its note."""
    t = time.perf_counter()
    hyde = await _hyde(
        turn.masked_question, turn.rewritten, turn.queries, turn.language, model, settings
    )
    turn.timings["hyde"] = _ms(t)
    turn.fire("hyde", hyde.note())
    if hyde.status == "failed":
        turn.errors.append(f"hyde failed: {hyde.reason}")
    turn.hyde = hyde


async def _searched(
    turn: _Turn,
    scope: Scope,
    engine: Searcher,
    embedder: QueryEmbedder | None,
    settings: RetrievalSettings,
) -> _Found:
    """Run the turn's searches and the probes; never raise (a failure finds nothing)."""
    queries, rewrite, timings, errors = turn.queries, turn.rewritten, turn.timings, turn.errors
    # A follow-up's topic is searched alone as evidence of where the conversation is.
    follow_up = not turn.first and any(q.reading == "contextual" for q in queries)
    probe = rewrite.topic if follow_up else None
    # And the last reply's words, as evidence of which documents it came from.
    reply = reply_probe([(m.role, m.text) for m in turn.window]) if probe else None
    probes = [text for text in (probe, reply) if text]
    texts = [q.text for q in queries] + probes
    hints = [q.area for q in queries] + [None for _ in probes]
    # A hypothetical answer is searched on the vector leg alone (hyde.py says why).
    full_text = [q.type != "hyde" for q in queries] + [True for _ in probes]
    requests = [
        SearchRequest(text=without_asking_words(text), vector=(), area=area, full_text=ft)
        for text, area, ft in zip(texts, hints, full_text, strict=True)
    ]
    # The probe runs on the full-text leg only: the topic's own words locate the
    # conversation well enough, and one embedding less is most of the probe's cost.
    embedding = bool(queries) and embedder is not None
    if queries and embedder is None:
        errors.append("vector search off: the collection was embedded with another model")

    def vectors() -> list[list[float]]:
        """The queries' vectors, then none for the probes; none at all if the embedder fails
        (each query then runs with its full-text leg only)."""
        started = time.perf_counter()
        found: list[list[float]] = []
        if embedder is not None:
            try:
                found = _embed(embedder, queries)
            except Exception as exc:  # any embedder failure: full-text only
                errors.append(f"embedding failed: {exc}")
            # A hypothetical answer is embedded as a passage: no query side to compare.
            turn.vectors = {
                q.text: unit_vector(v)
                for q, v in zip(queries, found, strict=False)
                if q.type != "hyde" and v
            }
        timings["embed"] = _ms(started)
        return (found or [[] for _ in queries]) + [[] for _ in probes]

    t = time.perf_counter()
    results: list[list[Hit]] = []
    if requests:
        try:
            # On a thread; a stopped turn cancels the statements in PostgreSQL (`cancellable`).
            if embedding:  # the full-text legs run while the queries are embedded
                results = await cancellable(
                    lambda call: engine.search_while_embedding(
                        requests, scope, settings.search, vectors, call=call
                    )
                )
            else:
                results = await cancellable(
                    lambda call: engine.search_many(requests, scope, settings.search, call=call)
                )
        except Exception as exc:  # the database failing must still end the turn with a message
            errors.append(f"search failed: {exc.__class__.__name__}")
            results = [[] for _ in requests]
    # "search": what the searches added to the embedding (the full-text legs overlap it).
    embed_ms = timings.setdefault("embed", 0.0)
    timings["search"] = round(max(0.0, _ms(t) - embed_ms), 2)
    reply_hits = results.pop() if reply else None
    topic_hits = results.pop() if probe else None
    return _Found(results, topic_hits, reply_hits)


def _filters(turn: _Turn, found: _Found, areas: Sequence[str]) -> _Found:
    """Keep the reading the evidence supports; note the countries and areas the turn names."""
    queries, results, reason, reading = (
        (turn.queries, found.results, None, None)
        if turn.first
        else _decide_reading(
            turn.rewritten, turn.queries, found.results, found.topic_hits, turn.language
        )
    )
    turn.queries = queries
    if reason is not None and reading is not None:
        turn.changes["decision"] = reason
        turn.fire(_READING_RULES[reading], f"evidence: {reason}")
    user_words = [m.text for m in turn.window if m.role == "user"]
    countries = turn_countries(queries, user_words)
    if countries:
        named = tuple(sorted(countries))
        turn.changes["countries"] = named
        turn.fire(
            "country",
            f"country filter: {', '.join(named)} (its pages first, other countries' pages after)",
        )
    asked_areas = area_ask([turn.masked_question, *(q.text for q in queries)], areas)
    if asked_areas:
        named = tuple(sorted(asked_areas))
        turn.changes["areas"] = named
        turn.fire("area", f"area filter: {', '.join(named)} (its passages first)")
    return replace(found, results=results)


async def _ranked(
    turn: _Turn,
    found: _Found,
    model: ChatModel | None,
    settings: RetrievalSettings,
    today: date | None,
) -> tuple[list[MergedHit], str | None, RerankRecord | None]:
    """Fuse the hits, favour the last reply's pages, rerank, and apply the preferences.

    Returns the ranking, the page a preference put first (the answer keeps it), and the
    rerank's record.
    """
    queries, rewrite = turn.queries, turn.rewritten
    # A message split into questions: each question's best passage competes on equal
    # terms ("max"), so one topic's passages, found again by the user's own words, do not
    # push the other topic's out of the cut.
    split = any(q.type == "decompose" for q in queries)
    strategy: FusionStrategy = "max" if split else settings.fusion
    merged = merge_results(queries, found.results, strategy=strategy, rrf_k=settings.rrf_k)
    if found.reply_hits and not split and any(q.reading == "contextual" for q in queries):
        asked = content_terms(turn.masked_question) + [
            word for h in rewrite.glossary_hits for word in content_terms(h.expansion)
        ]
        merged, lifted = favour_reply_documents(merged, found.reply_hits, asked)
        if lifted:
            turn.fire(
                "reply_documents",
                "evidence: the last reply's documents win close calls ("
                + ", ".join(lifted)
                + " moved up)",
            )
    rerank: RerankRecord | None = None
    if settings.rerank is not None:
        started = time.perf_counter()
        merged, rerank = await _rerank(
            turn.masked_question, rewrite, queries, merged, model, settings
        )
        turn.timings["rerank"] = _ms(started)
        turn.fire("rerank", rerank.note())
        if rerank.status == "kept":
            turn.errors.append(f"rerank failed: {rerank.reason}")
    searched_first = merged[0].hit.document_id if merged else None
    merged, version_note = prefer_current(merged, version_ask([q.text for q in queries], today))
    if version_note:
        turn.fire("version", version_note)
    merged = prefer_countries(merged, frozenset(turn.changes.get("countries", rewrite.countries)))
    merged = prefer_areas(merged, frozenset(turn.changes.get("areas", rewrite.areas)))
    merged = prefer_named_titles(
        merged, [h.expansion for h in rewrite.glossary_hits if h.source == "question"]
    )
    # A version, a country, an area or the company terms the turn named put another page
    # first: the answer keeps it.
    pinned = (
        str(merged[0].hit.document_id)
        if merged and merged[0].hit.document_id != searched_first
        else None
    )
    return merged, pinned, rerank


# What of a query is embedded: the embedding models read 512 tokens at most (e5-small's
# window), and a token is at least one character. The user's own words are searched whole on
# the full-text leg, but never embedded past this: the engine's time grows faster than the
# text, so a 4,000-character message ("http://" + "a." x 2000) took 14.5 s to embed and held
# the one embedder every other turn waits for (issue 38, finding 2).
EMBED_MAX_CHARS = 512


def embedded_text(text: str) -> str:
    """The part of a query's text that is embedded (see EMBED_MAX_CHARS)."""
    return text[:EMBED_MAX_CHARS]


def _embed(embedder: QueryEmbedder, queries: Sequence[SearchQuery]) -> list[list[float]]:
    """The queries' vectors in their order: a hypothetical answer embedded as a passage."""
    vectors = embedder.embed_queries([embedded_text(q.text) for q in queries if q.type != "hyde"])
    hyde = [embedded_text(q.text) for q in queries if q.type == "hyde"]
    if hyde:
        as_passage = embedder.embed_passages if isinstance(embedder, PassageEmbedder) else None
        extra = (as_passage or embedder.embed_queries)(hyde)
    else:
        extra = []
    own, guessed = iter(vectors), iter(extra)
    return [next(guessed) if q.type == "hyde" else next(own) for q in queries]


async def _hyde(
    question: str,
    rewrite: RewriteResult,
    queries: list[SearchQuery],
    language: str | None,
    model: ChatModel | None,
    settings: RetrievalSettings,
) -> HydeRecord:
    """Add a hypothetical answer to `queries` when the turn has something to answer."""
    reason = None
    if model is None:
        reason = "no model server"
    elif not queries:
        reason = "nothing is searched"
    elif rewrite.needs_clarification:
        reason = "the turn asks back"
    elif any(q.type == "hyde" for q in queries):
        reason = "the rewrite wrote one"
    elif any(q.type == "decompose" for q in queries):
        reason = "a split message: one hypothesis would mix its questions"
    if reason is not None or model is None or settings.hyde is None:
        return HydeRecord("skipped", reason or "off")
    query, record = await hyde_stage(
        question=question,
        queries=queries,
        language=language,
        model=model,
        settings=settings.hyde,
        weight=settings.query_weights.get("hyde", 0.7),
    )
    if query is not None:
        # Before the user's own words, which stay last (RetrievalOutcome.queries).
        at = len(queries) - 1 if queries[-1].type == "original" else len(queries)
        queries.insert(at, query)
    return record


async def _rerank(
    question: str,
    rewrite: RewriteResult,
    queries: Sequence[SearchQuery],
    merged: list[MergedHit],
    model: ChatModel | None,
    settings: RetrievalSettings,
) -> tuple[list[MergedHit], RerankRecord]:
    """The fused hits with the model's order on top, when the turn has candidates to order."""
    reason = None
    if model is None:
        reason = "no model server"
    elif rewrite.needs_clarification:
        reason = "the turn asks back"
    elif any(q.type == "decompose" for q in queries):
        reason = "a split message: each question keeps its own best"
    if reason is not None or model is None or settings.rerank is None:
        return merged, RerankRecord("skipped", reason or "off")
    return await rerank_stage(
        question=question, queries=queries, merged=merged, model=model, settings=settings.rerank
    )


async def _cached_rewrite(
    inp: RewriteInput,
    settings: RetrievalSettings,
    lexicon: LexiconFetcher,
    model: ChatModel | None,
    errors: list[str],
    scope: Scope,
    cache: RewriteCache | None,
) -> RewriteResult:
    """Rewrite, or take the same rewrite from `cache` (see rewrite_cache.py).

    Only a model's rewrite is kept: it costs seconds, while the rules take milliseconds and
    read the corpus's vocabulary, which an ingestion changes. A rewrite that failed over to
    the rules is never kept, so the next turn asks the model again.
    """
    if cache is None or settings.mode != "llm" or model is None:
        return await _rewrite(inp, settings, lexicon, model, errors)
    key = cache_key(
        inp, scope=scope, policy=llm_policy(model.name), backend="llm", model=model.name
    )
    t = time.perf_counter()
    try:
        state = await asyncio.to_thread(cache.get, key)
    except Exception as exc:  # the cache is an aid: rewrite as if it were empty
        errors.append(f"rewrite cache unavailable: {exc.__class__.__name__}")
        return await _rewrite(inp, settings, lexicon, model, errors)
    if state is not None:
        try:
            rewrite, computed_ms = from_state(state)
        except (KeyError, TypeError, ValueError):
            state = None  # a state of another shape: rewrite and store it anew
        else:
            note = f"rewrite cache: hit (saved {max(0.0, computed_ms - _ms(t)):.1f} ms)"
            fired = [*rewrite.fired, FiredRule("rewrite_cache", note)]
            return replace(rewrite, cache="hit", notes=[*rewrite.notes, note], fired=fired)
    started = time.perf_counter()
    rewrite = await _rewrite(inp, settings, lexicon, model, errors)
    computed_ms = _ms(started)
    if rewrite.error is None:
        try:
            await asyncio.to_thread(cache.set, key, to_state(rewrite, computed_ms))
        except Exception as exc:  # not kept this time; the turn goes on
            errors.append(f"rewrite cache unavailable: {exc.__class__.__name__}")
    return replace(rewrite, cache="miss")


async def _rewrite(
    inp: RewriteInput,
    settings: RetrievalSettings,
    lexicon: LexiconFetcher,
    model: ChatModel | None,
    errors: list[str],
) -> RewriteResult:
    if settings.mode in {"none", "last-turn"}:
        return _baseline_rewrite(inp, settings.mode)

    def rules() -> RewriteResult:
        words = lexicon_words(inp)
        try:
            view = lexicon(words)
        except Exception as exc:  # the vocabulary is an aid: rewrite without it
            errors.append(f"vocabulary lookup failed: {exc}")
            view = LexiconView()
        try:
            view = replace(view, language_words=known_words(words, inp.language))
        except Exception as exc:  # the dictionary is an aid too
            errors.append(f"dictionary lookup failed: {exc.__class__.__name__}")
        try:
            return replace(rewrite_with_rules(inp, view), policy=tuned_policy(tuning()))
        except Exception as exc:  # never break the turn: search the question as typed
            errors.append(f"rule rewrite failed: {exc.__class__.__name__}: {exc}")
            return replace(
                _baseline_rewrite(inp, "none"),
                error=f"rule rewrite failed: {exc.__class__.__name__}",
                glossary_hits=find_glossary_hits(inp.question, inp.glossary),
            )

    if settings.mode == "llm" and model is not None:
        result = await rewrite_with_llm(
            inp, model, timeout=settings.rewrite_timeout, fallback=lambda: rules()
        )
        if result.error:
            errors.append(result.error)
        return result
    if settings.mode == "llm":
        errors.append("no model server configured: used the rule rewriter")
    return await asyncio.to_thread(rules)
