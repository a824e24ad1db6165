"""Django glue for the pipeline: settings-driven backends, the reader's scope, vocabulary."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar

from cachetools import LRUCache, TTLCache
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import Count
from django.utils import timezone
from django.utils.module_loading import import_string
from psycopg.conninfo import make_conninfo

from retrieval.access import documents_readable_by, reader_for
from retrieval.embeddings import Embedder, get_embedder
from retrieval.models import Collection, Document, GlossaryEntry
from retrieval.pipeline.fusion import FusionStrategy
from retrieval.pipeline.glossary import glossary_in_language
from retrieval.pipeline.llm import ChatModel
from retrieval.pipeline.masking import DEFAULT_EMPLOYEE_ID_PATTERN, MaskingConfig
from retrieval.pipeline.model_stages import HydeSettings, RerankSettings
from retrieval.pipeline.plan import TurnBackends, TurnRequest, turn_language
from retrieval.pipeline.retrieve import RetrievalSettings, RewriteMode
from retrieval.pipeline.rewrite_cache import RewriteCache
from retrieval.pipeline.search import (
    READABLE_CHUNKS_SQL,
    SPELLING_SIMILARITY,
    Scope,
    SearchEngine,
    SearchParams,
    get_engine,
    readable_sql,
)
from retrieval.pipeline.text import LANGUAGES
from retrieval.pipeline.tuning import DEFAULT_TUNING, Tuning
from retrieval.pipeline.types import GlossaryEntry as GlossaryValue
from retrieval.pipeline.types import HistoryMessage, LexiconView


def database_conninfo() -> str:
    """A libpq conninfo for the database Django uses now (the test database in tests)."""
    db = connection.settings_dict
    # dj-database-url puts a Unix-socket host given as ?host=... into OPTIONS.
    options = db.get("OPTIONS") or {}
    port = db.get("PORT") or options.get("port")
    parts: dict[str, Any] = {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or options.get("host") or None,
        "port": str(port) if port else None,
    }
    return make_conninfo("", **{k: v for k, v in parts.items() if v})


def search_engine() -> SearchEngine:
    """The process-wide search engine for the current database."""
    return get_engine(
        database_conninfo(),
        pool_size=settings.CHATRAG_SEARCH_POOL_SIZE,
        hnsw_ef_search=settings.CHATRAG_SEARCH_HNSW_EF,
    )


def search_params() -> SearchParams:
    return SearchParams(
        vector_weight=settings.CHATRAG_SEARCH_VECTOR_WEIGHT,
        text_weight=settings.CHATRAG_SEARCH_TEXT_WEIGHT,
        rrf_k=settings.CHATRAG_SEARCH_RRF_K,
        vector_candidates=settings.CHATRAG_SEARCH_VECTOR_CANDIDATES,
        text_candidates=settings.CHATRAG_SEARCH_TEXT_CANDIDATES,
        text_rerank=settings.CHATRAG_SEARCH_TEXT_RERANK,
        limit=max(20, settings.CHATRAG_SEARCH_PASSAGES * 3),
    )


def employee_id_pattern() -> str:
    """The registration-number pattern to mask: CHATRAG_EMPLOYEE_ID_PATTERN or masking's default."""
    return settings.CHATRAG_EMPLOYEE_ID_PATTERN or DEFAULT_EMPLOYEE_ID_PATTERN


class _DjangoRewriteCache:
    """The rewrite cache on Django's cache (Redis with REDIS_URL, the database otherwise)."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    # Called from a worker thread of the turn: the database cache's connection is handed
    # back after each call, as at the end of a request.
    def get(self, key: str) -> dict[str, Any] | None:
        from django.core.cache import cache
        from django.db import close_old_connections

        try:
            value = cache.get(key)
        finally:
            close_old_connections()
        return value if isinstance(value, dict) else None

    def set(self, key: str, value: dict[str, Any]) -> None:
        from django.core.cache import cache
        from django.db import close_old_connections

        try:
            cache.set(key, value, self.seconds)
        finally:
            close_old_connections()


def rewrite_cache() -> RewriteCache | None:
    """The turns' rewrite cache, or None when CHATRAG_REWRITE_CACHE_SECONDS is 0."""
    seconds = settings.CHATRAG_REWRITE_CACHE_SECONDS
    return _DjangoRewriteCache(seconds) if seconds else None


def retrieval_settings(
    *, mode: RewriteMode | None = None, hyde: bool | None = None, rerank: bool | None = None
) -> RetrievalSettings:
    """Pipeline knobs from settings; the rewrite mode defaults to llm when a model is set.

    `hyde` and `rerank` switch the optional model stages on or off (None: as the settings
    say, CHATRAG_HYDE and CHATRAG_RERANK, both off by default).
    """
    if mode is None and settings.CHATRAG_REWRITE_MODE != "auto":
        mode = "llm" if settings.CHATRAG_REWRITE_MODE == "llm" else "rules"
    if mode is None:
        mode = "llm" if settings.CHATRAG_LLM_BACKEND else "rules"
    fusion: FusionStrategy = "max" if settings.CHATRAG_SEARCH_FUSION == "max" else "rrf"
    return RetrievalSettings(
        mode=mode,
        window=settings.CHATRAG_REWRITE_WINDOW,
        max_queries=settings.CHATRAG_REWRITE_MAX_QUERIES,
        max_query_chars=settings.CHATRAG_REWRITE_MAX_QUERY_CHARS,
        query_weights={
            **RetrievalSettings().query_weights,
            "original": settings.CHATRAG_SEARCH_ORIGINAL_WEIGHT,
        },
        fusion=fusion,
        rrf_k=settings.CHATRAG_SEARCH_RRF_K,
        passages=settings.CHATRAG_SEARCH_PASSAGES,
        max_per_document=settings.CHATRAG_SEARCH_MAX_PER_DOCUMENT,
        rewrite_timeout=settings.CHATRAG_REWRITE_TIMEOUT,
        masking=MaskingConfig(employee_id_pattern=employee_id_pattern()),
        search=search_params(),
        hyde=(
            HydeSettings(
                max_chars=settings.CHATRAG_HYDE_MAX_CHARS, timeout=settings.CHATRAG_HYDE_TIMEOUT
            )
            if (settings.CHATRAG_HYDE if hyde is None else hyde)
            else None
        ),
        rerank=(
            RerankSettings(
                candidates=settings.CHATRAG_RERANK_CANDIDATES,
                passage_chars=settings.CHATRAG_RERANK_PASSAGE_CHARS,
                timeout=settings.CHATRAG_RERANK_TIMEOUT,
            )
            if (settings.CHATRAG_RERANK if rerank is None else rerank)
            else None
        ),
    )


def _new_chat_model(path: str, url: str, model: str, api_key: str) -> ChatModel:
    cls = import_string(path)
    instance: ChatModel = cls(base_url=url, model=model, api_key=api_key or None)
    return instance


_chat_model = lru_cache(maxsize=1)(_new_chat_model)


def chat_model(*, fresh: bool = False, model_name: str | None = None) -> ChatModel | None:
    """The configured chat model, or None when no model server is configured.

    The process keeps one (its client is reused across turns); `fresh` builds another, with
    a client of its own, for work on another event loop than the one the process-wide
    model's client is bound to (an evaluation run); whoever asks for it closes it.
    `model_name`: another model on the same server (a candidate policy in the promotion
    gate); always a fresh one.
    """
    if not settings.CHATRAG_LLM_BACKEND:
        return None
    build = _new_chat_model if fresh or model_name else _chat_model
    return build(
        settings.CHATRAG_LLM_BACKEND,
        settings.CHATRAG_LLM_URL,
        model_name or settings.CHATRAG_LLM_MODEL,
        settings.CHATRAG_LLM_API_KEY,
    )


def scope_for_user(*, user: User | AnonymousUser, collection: Collection) -> Scope:
    """What this user may search in the collection (`retrieval.access.reader_for`'s rule).

    Anonymous and inactive users read nothing, so they get no scope at all.
    """
    reader = reader_for(user)
    if reader is None:
        raise PermissionError("search needs an active, authenticated user")
    return Scope.of(reader, collection_id=collection.id)


def scope_common(first: Scope, second: Scope) -> Scope:
    """At most what both readers may read: where one person looks at another's results.

    A document is readable through any one of its groups, so the groups both readers hold
    are kept; a document of two groups, one each, falls out (less, never more).
    """
    if first.collection_id != second.collection_id:
        raise ValueError("the scopes are for different collections")
    if first.see_everything:
        return second
    if second.see_everything:
        return first
    return Scope(
        collection_id=first.collection_id,
        group_ids=tuple(sorted(set(first.group_ids) & set(second.group_ids))),
    )


def glossary_for(*, collection: Collection) -> list[GlossaryValue]:
    """The collection's active glossary as pure values."""
    return [
        GlossaryValue(term=e.term, expansion=e.expansion, area=e.area or None, language=e.language)
        for e in GlossaryEntry.objects.filter(collection=collection, active=True)
    ]


def query_embedder_for(*, collection: Collection) -> Embedder | None:
    """The embedder, or None when the collection's vectors come from another model.

    Mixing vectors of two models would rank nonsense; the full-text leg still answers until
    the collection is re-ingested.
    """
    embedder = get_embedder()
    if collection.embedding_model and collection.embedding_model != embedder.name:
        return None
    return embedder


def default_language() -> str:
    """The language assumed when neither a text nor its collection tells (the setting)."""
    return settings.CHATRAG_DEFAULT_LANGUAGE


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _KeptAMinute(Generic[K, V]):
    """Aggregates over a collection's documents, kept a minute in each process: they change
    only when documents are ingested, and counting them on every turn grows with them.

    A `cachetools.TTLCache` behind a lock (the turns' database threads share it); bounded,
    the least recently used key going first.
    """

    MAX_AGE_S = 60.0
    MAX_KEYS = 256

    def __init__(self) -> None:
        self._values: TTLCache[K, V] = TTLCache(maxsize=self.MAX_KEYS, ttl=self.MAX_AGE_S)
        self._lock = threading.Lock()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._values:
                return self._values[key]
        value = compute()  # outside the lock: a slow count does not hold the other readers
        with self._lock:
            self._values[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


# Counting every document's language took 21 ms of each turn at 13k documents (the benchmark's
# 100k chunks, on a busy machine) and grows with them.
_languages: _KeptAMinute[tuple[int, str], str] = _KeptAMinute()


def collection_language(*, collection: Collection) -> str:
    """The language most of the collection's documents are in (else the configured default).

    A turn too short to tell its own language ("node data") is read in it.
    """

    def count() -> str:
        row = (
            Document.objects.filter(collection=collection)
            .values("language")
            .annotate(n=Count("id"))
            .order_by("-n")
            .first()
        )
        language = str(row["language"]) if row else ""
        return language if language in LANGUAGES else default_language()

    return _languages.get((collection.id, default_language()), count)


_areas: _KeptAMinute[Scope, tuple[str, ...]] = _KeptAMinute()


def collection_areas(*, scope: Scope) -> tuple[str, ...]:
    """The areas of the documents this scope's reader may read ("rh", "financeiro", ...).

    A turn that names one ("no financeiro") has its passages first; an area only restricted
    documents have is not one the reader can name, nor learn of from the trace. Kept a minute
    per process, like the collection's language.
    """

    def read() -> tuple[str, ...]:
        documents = documents_readable_by(
            scope.reader,
            Document.objects.filter(collection_id=scope.collection_id).exclude(area=""),
        )
        return tuple(sorted(set(documents.values_list("area", flat=True))))

    return _areas.get(scope, read)


def default_collection() -> Collection:
    collection, _ = Collection.objects.get_or_create(
        slug=settings.CHATRAG_COLLECTION, defaults={"name": "Company knowledge base"}
    )
    return collection


# Which vocabulary rows a reader may count: each row holds one document-group set's counts
# (empty: public), read by the rule the search applies to chunks.
_READABLE_SETS = readable_sql("v.group_ids", public="v.group_ids = '{}'")
_DF_SQL = f"""
    SELECT v.word, sum(v.df)::int FROM retrieval_vocabularyterm v
    WHERE v.collection_id = %(collection)s AND v.word = ANY(%(words)s) AND {_READABLE_SETS}
    GROUP BY v.word
"""  # noqa: S608 - constants; every value is bound
# The vocabulary's version (0 before its first rebuild).
_VERSION_SQL = """
    SELECT coalesce(
        (SELECT vv.version FROM retrieval_vocabularyversion vv
         WHERE vv.collection_id = %(collection)s),
        0
    )
"""
# A turn's words in one round trip: the known words' counts; for each spellable word the
# corpus does not know, the closest word the reader can read (most frequent for them on a
# tie); and those corrections' counts. Rows are (word, df, None) or (word, None, correction),
# and (None, version, None).
# The trigram index finds the candidates in every collection (`%` at SPELLING_SIMILARITY, see
# SearchEngine), and only then are the reader's collection and groups applied: left to itself
# the planner scanned a small collection's words and computed each one's similarity, for each
# unknown word (~10 ms a word at 2,600 words, beside other collections of 60,000).
_LEXICON_SQL = f"""
    WITH known(word, df) AS ({_DF_SQL}),
    unknown AS (
        SELECT u.w FROM unnest(%(spellable)s::text[]) AS u(w)
        WHERE u.w NOT IN (SELECT k.word FROM known k)
    ),
    candidates AS MATERIALIZED (
        SELECT u.w, v.word, v.df, v.collection_id, v.group_ids
        FROM unknown u JOIN retrieval_vocabularyterm v ON v.word %% u.w
    ),
    fixes AS (
        SELECT DISTINCT ON (best.w) best.w, best.word
        FROM (
            SELECT v.w, v.word, similarity(v.word, v.w) AS sim, sum(v.df) AS df
            FROM candidates v
            WHERE v.collection_id = %(collection)s AND {_READABLE_SETS}
            GROUP BY v.w, v.word
        ) best
        WHERE best.sim >= {SPELLING_SIMILARITY}
        ORDER BY best.w, best.sim DESC, best.df DESC, best.word
    )
    SELECT k.word, k.df, NULL FROM known k
    UNION ALL
    SELECT v.word, sum(v.df)::int, NULL FROM retrieval_vocabularyterm v
    WHERE v.collection_id = %(collection)s AND v.word = ANY(ARRAY(SELECT f.word FROM fixes f))
        AND {_READABLE_SETS}
    GROUP BY v.word
    UNION ALL
    SELECT f.w, NULL, f.word FROM fixes f
    UNION ALL
    SELECT NULL, ({_VERSION_SQL}), NULL
"""  # noqa: S608 - constants; every value is bound
_COUNT_MAX_AGE_S = 60.0
# How many chunks each reader scope may read, with the vocabulary version it was counted at.
_readable_counts: TTLCache[Scope, tuple[int, int]] = TTLCache(maxsize=1024, ttl=_COUNT_MAX_AGE_S)
_readable_lock = threading.Lock()


@dataclass
class _Known:
    """What one reader's lookups found in one version of a collection's vocabulary."""

    version: int
    df: dict[str, int | None] = field(default_factory=dict)  # None: not in the corpus
    fixes: dict[str, str | None] = field(default_factory=dict)  # a spellable unknown's

    def add(self, words: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        found = {word: count for word, count, fix in rows if fix is None}
        fixes = {word: fix for word, _, fix in rows if fix is not None}
        for word in words:
            self.df[word] = found.get(word)
            if found.get(word) is None and _spellable(word):
                self.fixes[word] = fixes.get(word)
        for fix in fixes.values():
            if fix in found:
                self.df[fix] = found[fix]

    def view(self, words: Sequence[str], n_chunks: int) -> LexiconView:
        """The statistics of `words` as one lookup of them would give them."""
        df: dict[str, int] = {}
        corrections: dict[str, str] = {}
        for word in words:
            count = self.df.get(word)
            fix = self.fixes.get(word) if count is None else None
            if count is not None:
                df[word] = count
            elif fix is not None:
                corrections[word] = fix
                fix_count = self.df.get(fix)
                if fix_count is not None:
                    df[fix] = fix_count
        return LexiconView(df=df, n_chunks=n_chunks, corrections=corrections)


# Word statistics kept between turns, per reader scope, for one vocabulary version: a turn
# looks up its history's words again, and their spelling candidates cost most of the lookup.
# Bounded (~1.5 MB a scope at most): a scope past its words starts over, and a 17th scope
# pushes out the least recently used one.
_known: LRUCache[Scope, _Known] = LRUCache(maxsize=16)
_known_lock = threading.Lock()
_KNOWN_MAX_WORDS = 10_000


# The longest word the vocabulary lookup takes (longer ones are not words of any document).
MAX_WORD_CHARS = 64


def _spellable(word: str) -> bool:
    """Short words and numbers are never corrected."""
    return len(word) >= 4 and not word.isdigit()


def _scope_args(scope: Scope, **extra: Any) -> dict[str, Any]:
    return {"collection": scope.collection_id, **scope.sql_args(), **extra}


def vocabulary_df(*, scope: Scope, words: Sequence[str]) -> dict[str, int]:
    """In how many chunks the reader may read each word appears (absent: none of them)."""
    if not words:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_DF_SQL, _scope_args(scope, words=list(words)))
        return {word: int(df) for word, df in cursor.fetchall()}


class VocabularyLexicon:
    """Fetch corpus statistics for a turn's words in one query (pg_trgm for spelling).

    Everything is counted over what `scope` may read: a word that appears only in documents
    the reader cannot open is unknown to them, is never offered as a spelling correction,
    and restricted chunks count neither in `df` nor in `n_chunks`.
    """

    def __init__(
        self, engine: SearchEngine, collection_id: int, *, scope: Scope | None = None
    ) -> None:
        # Without a scope only public documents count: forgetting the reader must not leak.
        if scope is None:
            scope = Scope(collection_id=collection_id)
        if scope.collection_id != collection_id:
            raise ValueError("the scope is for another collection")
        self.engine = engine
        self.scope = scope

    def __call__(self, words: set[str]) -> LexiconView:
        # The whole window rarely passes a few hundred words; the cap only bounds abuse.
        # No word of the corpus is longer than MAX_WORD_CHARS: a longer one is unknown, and
        # is not looked up (pg_trgm's similarity on a 72,000-character "word", what 3,990
        # copies of the ligature U+FDFA become, took 13.6 s: issue 38, finding 2).
        wanted = sorted(w for w in words if w and len(w) <= MAX_WORD_CHARS)[:2000]
        if not wanted:
            return LexiconView()
        with _known_lock:
            known = _known.get(self.scope)
        missing = wanted if known is None else [w for w in wanted if w not in known.df]
        with self.engine.pool.connection() as conn:
            version, rows = self._look_up(conn, missing)
            if known is not None and known.version != version and len(missing) < len(wanted):
                # The words taken from the cache were counted by an older vocabulary.
                missing = wanted
                version, rows = self._look_up(conn, missing)
            n_chunks = self._readable_chunks(conn, version)
        with _known_lock:
            if known is None or known.version != version:
                known = _Known(version)
            known.add(missing, rows)
            view = known.view(wanted, n_chunks)
            if len(known.df) > _KNOWN_MAX_WORDS:
                known = _Known(version)
            _known[self.scope] = known
        return view

    def _look_up(self, conn: Any, words: list[str]) -> tuple[int, list[tuple[Any, ...]]]:
        """The vocabulary's version, and the rows of _LEXICON_SQL for `words`."""
        if not words:
            row = conn.execute(_VERSION_SQL, _scope_args(self.scope)).fetchone()
            return int(row[0]), []
        spellable = [w for w in words if _spellable(w)]
        args = _scope_args(self.scope, words=words, spellable=spellable)
        rows = conn.execute(_LEXICON_SQL, args).fetchall()
        version = next(int(count) for word, count, _ in rows if word is None)
        return version, [row for row in rows if row[0] is not None]

    def _readable_chunks(self, conn: Any, version: int) -> int:
        """How many chunks the reader may read.

        Kept for a minute (it only weighs words), and counted again at once after the
        vocabulary was rebuilt (an ingestion, a deletion, a change of groups).
        """
        with _readable_lock:
            cached = _readable_counts.get(self.scope)
        if cached is not None and cached[0] == version:
            return cached[1]
        row = conn.execute(READABLE_CHUNKS_SQL, _scope_args(self.scope)).fetchone()
        count = int(row[0]) if row else 0
        with _readable_lock:
            _readable_counts[self.scope] = (version, count)
        return count


def known_names_for(user: Any) -> Sequence[str]:
    """Names to mask for this user: their own first, last and full name."""
    names = [user.get_full_name(), user.first_name, user.last_name]
    return [n for n in names if n and len(n) >= 3]


def turn_request_for(
    *,
    question: str,
    history: Sequence[HistoryMessage],
    collection: Collection,
    scope: Scope,
    reader: Any = None,
    language: str | None = None,
    settings: RetrievalSettings | None = None,
    today: date | None = None,
    tuning: Tuning = DEFAULT_TUNING,
) -> TurnRequest:
    """The one way to ask the pipeline for a turn (chat, evaluation, playground, gate).

    `reader`: whose names are masked (None: nobody's); `language`: a language the caller
    knows (an evaluation task's), else the turn's own (`plan.turn_language`); `settings`:
    the pipeline's, else the turn's (`retrieval_settings`); `tuning`: the decisions'
    thresholds (an evaluation may try another file's).
    """
    fallback = collection_language(collection=collection)
    decided = turn_language(question, history, explicit=language, default=fallback)
    return TurnRequest(
        question=question,
        history=tuple(history),
        scope=scope,
        # A term with an entry in the turn's language expands to that one ("IRPF").
        glossary=glossary_in_language(glossary_for(collection=collection), decided),
        settings=settings if settings is not None else retrieval_settings(),
        language=decided,
        default_language=fallback,
        known_names=tuple(known_names_for(reader)) if reader is not None else (),
        areas=collection_areas(scope=scope),
        today=today if today is not None else timezone.localdate(),
        tuning=tuning,
    )


def turn_backends_for(
    *,
    collection: Collection,
    scope: Scope,
    model: ChatModel | None | Literal["settings"] = "settings",
    cached: bool = True,
) -> TurnBackends:
    """The search, embedder, vocabulary, model and rewrite cache a turn on `collection` uses.

    `model`: the chat model (default: the settings' one; None: no model). `cached`: whether
    a model's rewrites are kept (the chat's cache; an evaluation measures every rewrite).
    """
    engine = search_engine()
    return TurnBackends(
        searcher=engine,
        embedder=query_embedder_for(collection=collection),
        lexicon=VocabularyLexicon(engine, collection.id, scope=scope),
        model=chat_model() if model == "settings" else model,
        rewrite_cache=rewrite_cache() if cached else None,
    )
