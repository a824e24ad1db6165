"""Hybrid search in PostgreSQL: pgvector + full-text, fused by RRF in one SQL statement.

- Both legs filter by collection and by the reader's groups inside the SQL, so a document
  the user may not read never leaves the database.
- The full-text leg ORs the query's words (websearch syntax, bound as a parameter) against
  the stored, GIN-indexed vectors in each chunk's own language configuration, so long
  natural questions still match; a chunk ranks by ts_rank_cd times the summed rarity (idf in
  the collection's vocabulary) of the words it matches, so one rare word outweighs several
  common ones (Postgres's own ranking knows no rarity).
- Several queries run at once on pooled connections (threads: psycopg releases the GIL
  while it waits on the server).
- A call run by `cancellable` is cancelled in PostgreSQL when the task awaiting it is: a
  stopped turn's statements end there too (`SearchCall`), and their connections go back to
  the pool healthy.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

import psycopg
from psycopg import Connection
from psycopg.errors import QueryCanceled
from psycopg_pool import ConnectionPool

from .fusion import Hit
from .languages import text_search_configs
from .types import LineVector

logger = logging.getLogger(__name__)

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

# Which legs a search runs: both, fused (the product), or one alone (the playground compares).
Legs = Literal["hybrid", "vector", "text"]


@dataclass(frozen=True)
class SearchParams:
    """Knobs of one hybrid search (from settings)."""

    vector_weight: float = 1.0
    text_weight: float = 1.0
    rrf_k: int = 60
    vector_candidates: int = 40
    text_candidates: int = 40
    limit: int = 20
    area_boost: float = 0.004
    # The full-text leg's cost bounds, used from `text_tiers_from` chunks up; a smaller
    # collection ORs every word and ranks every match (measured best on the judged sets).
    text_tiers_from: int = 50_000
    text_and_terms: int = 3  # rarest known words required together by the first tier
    text_min_terms: int = 2  # rarest known words kept even when common
    text_max_df_ratio: float = 0.05  # words in more chunks than this share are left out...
    text_df_floor: int = 5000  # ...but never below this many chunks
    text_scan_limit: int = 2000  # rows fetched by a tier before ranking
    # At any size, only a tier's best `text_rerank` matches by ts_rank (about 1 µs a row) are
    # ranked by ts_rank_cd (10-20 µs a row, the leg's main cost when a common word matches
    # most of a collection); fewer matches than this are ranked exactly as before.
    text_rerank: int = 200
    # Tier 2 tests the collection's rows one by one when its words' postings in the table that
    # holds it (their chunks in the collection / the collection's share of that table: 1 in a
    # partition of its own) exceed this many times the collection's chunks (a posting costs
    # ~1/5 of a row's test).
    text_by_row_ratio: float = 5.0
    # One leg alone leaves the other out of the SQL (a weight of 0 would still list its
    # hits, at score 0, and show their ranks); the fused score is then that leg's RRF term.
    legs: Legs = "hybrid"


@dataclass(frozen=True)
class SearchRequest:
    """One query to run: its text (for full-text), its vector, and an optional area hint."""

    text: str
    vector: Sequence[float]
    area: str | None = None
    # False: the vector leg alone, whatever the params say (a hypothetical answer's words
    # are the model's, not the user's: matching them word for word ranks its inventions).
    full_text: bool = True


@dataclass(frozen=True)
class Reader:
    """Who reads, as the permission rule sees them (made by `retrieval.access.reader_for`).

    The rule: a document without groups is public, one with groups is readable by their
    members, and a superuser reads everything. It has three forms, each read off a Reader:
    `can_read` (Python), `readable_sql` (the search's SQL, bound by `Scope.sql_args`) and
    `retrieval.access.documents_readable` (the ORM: pages and the admin).
    """

    group_ids: tuple[int, ...] = ()
    everything: bool = False  # superusers only

    def can_read(self, document_group_ids: Iterable[int]) -> bool:
        """Whether this reader may read a document of these groups (none: public)."""
        groups = set(document_group_ids)
        return self.everything or not groups or not groups.isdisjoint(self.group_ids)


@dataclass(frozen=True)
class Scope:
    """Where to search and what the reader may see (from the authenticated session)."""

    collection_id: int
    group_ids: tuple[int, ...] = ()
    see_everything: bool = False  # superusers only

    @classmethod
    def of(cls, reader: Reader, *, collection_id: int) -> Scope:
        return cls(
            collection_id=collection_id,
            group_ids=tuple(sorted(reader.group_ids)),
            see_everything=reader.everything,
        )

    @property
    def reader(self) -> Reader:
        return Reader(group_ids=self.group_ids, everything=self.see_everything)

    def sql_args(self) -> dict[str, Any]:
        """The values `readable_sql` binds: %(all)s and %(groups)s."""
        return {"all": self.see_everything, "groups": sorted(self.group_ids)}


def readable_sql(groups: str, *, public: str) -> str:
    """The permission rule as SQL, on a row that carries its document's group ids.

    `groups` names the row's int[] of group ids and `public` its no-groups test (chunks keep
    an `is_public` flag; vocabulary rows an empty set). Binds `Scope.sql_args`.
    """
    return f"(%(all)s OR {public} OR {groups} && %(groups)s::int[])"


# On chunks, as both legs of the search filter them.
_READABLE_CHUNK = readable_sql("c.group_ids", public="c.is_public")
# On the vocabulary's rows, one per document-group set (empty: public documents).
_READABLE_WORDS = readable_sql("vs.group_ids", public="vs.group_ids = '{}'")
# How many chunks of a collection the reader may read: the "N" of the words' rarity.
READABLE_CHUNKS_SQL = f"""
    SELECT count(*) FROM retrieval_chunk c
    WHERE c.collection_id = %(collection)s AND {_READABLE_CHUNK}
"""  # noqa: S608 - constants; every value is bound


def fulltext_words(text: str, max_terms: int = 32) -> list[str]:
    """The distinct lower-case words of `text` (letters and digits only), in order."""
    words: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFC", text)):
        lowered = word.lower()
        if lowered in {"or", "and", "not"} or lowered in words:
            continue
        words.append(lowered)
        if len(words) >= max_terms:
            break
    return words


# Which configuration's query applies to a chunk, and whether it matches (GIN-indexable):
# each language file's configuration (named by its code), then "simple" for the rest.
_LANGUAGE_CONFIGS = tuple((config, code) for code, config in text_search_configs().items())
_CONFIGS = (*_LANGUAGE_CONFIGS, ("simple", "simple"))


# The language code of a chunk's text-search configuration ("simple": not known).
_CONFIG_LANGUAGE = dict(_LANGUAGE_CONFIGS)


def _per_config(kind: str, alias: str, source: str = "q") -> str:
    return (
        f"CASE {alias}.fts_config "
        + " ".join(
            f"WHEN '{config}' THEN {source}.{kind}_{short}" for config, short in _LANGUAGE_CONFIGS
        )
        + f" ELSE {source}.{kind}_simple END"
    )


# The configurations a collection's chunks use (`collection_configs`), in `_CONFIGS`' order;
# each other configuration's test is left out of the full-text leg's SQL. Every test reads the
# whole GIN index (a posting list spans every configuration and collection), so a Portuguese
# and Spanish collection read it four times for two configurations' matches.
Configs = tuple[str, ...]
ALL_CONFIGS: Configs = tuple(config for config, _ in _CONFIGS)
# A document's language code names its chunks' configuration (the ingestion's rule).
_LANGUAGE_CONFIG = {language: config for config, language in _CONFIG_LANGUAGE.items()}


def text_search_config_for(language: str) -> str:
    """The PostgreSQL text-search configuration of a document in `language` (its language
    file's; "simple" for a language without one)."""
    return _LANGUAGE_CONFIG.get(language, "simple")


def configs_of(languages: Iterable[str]) -> Configs:
    """The configurations of chunks in `languages` (document language codes), in order; all
    of them when there is none (a collection not ingested yet leaves nothing out)."""
    used = {_LANGUAGE_CONFIG.get(language, "simple") for language in languages}
    return tuple(config for config in ALL_CONFIGS if config in used) or ALL_CONFIGS


def _matches(kind: str, configs: Configs) -> str:
    return (
        "("
        + " OR ".join(
            f"(c.fts_config = '{config}' AND c.search_vector @@ q.{kind}_{short})"
            for config, short in _CONFIGS
            if config in configs
        )
        + ")"
    )


def _matches_row(kind: str, configs: Configs) -> str:
    """The same test as `_matches`, as a function call: no index can serve it, so the planner
    checks each row the collection filter found."""
    listed = ", ".join(f"'{config}'" for config in configs)
    return (
        f"(c.fts_config IN ({listed}) AND ts_match_vq(c.search_vector, {_per_config(kind, 'c')}))"
    )


def _tsqueries(kind: str, column: str | None = None) -> str:
    return ", ".join(
        f"websearch_to_tsquery('{config}', unaccent({column or kind + '_text'})) AS {kind}_{short}"
        for config, short in _CONFIGS
    )


def _tier(kind: str, gate: str, configs: Configs, *, by_row: bool = False) -> str:
    """One tier: at most `scan` chunks matching the `kind` query (when `gate` holds), ranked
    against the OR of all kept words: the best `rerank` of them by ts_rank, then by ts_rank_cd.

    `by_row` tests the collection's rows one by one instead of reading the GIN index.
    """
    return f"""
    SELECT m.id,
           ts_rank_cd(m.search_vector, {_per_config("or", "m")}, 1)
           * (SELECT coalesce(sum(r.idf), 0) FROM rarity r
              WHERE m.search_vector @@ {_per_config("one", "m", "r")}) AS score
    FROM (
        SELECT s.id, s.search_vector, s.fts_config
        FROM (
            SELECT c.id, c.search_vector, c.fts_config
            FROM retrieval_chunk c, q
            WHERE {gate}
              AND c.collection_id = %(collection)s
              AND {_READABLE_CHUNK}
              AND {_matches_row(kind, configs) if by_row else _matches(kind, configs)}
            LIMIT %(scan)s
        ) s, q
        ORDER BY ts_rank(s.search_vector, {_per_config("or", "s")}, 1) DESC, s.id
        LIMIT %(rerank)s
    ) m, q
"""  # noqa: S608 - composed of constants; every value is a bound parameter


# The full-text leg, in two tiers so that its cost stays bounded as the collection grows:
# - Word statistics come from the collection's vocabulary (built at ingestion). Words found in
#   more than `max_df` chunks carry little information and, ORed, would make Postgres fetch
#   and rank a large share of the table; they are left out (the rarest `min_terms` known words
#   always stay, so a question of common words still searches).
# - Tier 1 requires the `and_terms` rarest known words together: a small, precise set. Only
#   when it finds fewer than `kt` chunks does tier 2 add chunks matching ANY kept word (the OR
#   that long natural questions need). Each tier fetches at most `scan` rows before ranking.
# - Both tiers rank with ts_rank_cd against the OR of all kept words times the rarity of the
#   words the chunk matches (see `rarity`), so a chunk with more of the question's rare words
#   ranks higher.
# - Tier 2 reads the GIN index unless its words are common (their chunks in the collection,
#   summed, at least `by_row_df`): then the collection's rows are tested one by one, at a cost
#   bounded by the collection's size. A posting list spans the table the collection is in,
#   its own partition (retrieval.partitions); in one table shared by all, a small collection's
#   common words read the others' postings too (10k of 410k chunks: 200 ms of bitmaps).
# Below `text_tiers_from` there is no tier 1: its query is empty and matches nothing, but the
# planner still tested each of a small collection's rows against it (12 ms at 10k chunks).
_TIER1_WORDS = "(SELECT and_text FROM words) <> ''"
_TIER1_SHORT = "(SELECT count(*) FROM tier1) < %(kt)s"
_BY_ROW = "(SELECT or_df FROM words) >= %(by_row_df)s"


def _text_leg(configs: Configs) -> str:
    """The full-text leg's CTEs (ending in `txt`), testing the chunks of `configs` only."""
    return f"""
terms AS MATERIALIZED (
    SELECT t.w, t.ord, v.df,
           row_number() OVER (ORDER BY v.df IS NULL, v.df, t.ord) AS rarity
    FROM unnest(%(words)s::text[]) WITH ORDINALITY AS t(w, ord)
    -- One vocabulary row per document-group set: the word's df is the sum of the sets the
    -- reader may read. Counting the others too ranked a reader's results by words of
    -- documents they cannot open (a restricted page full of "quilometragem" moved the
    -- public ones about it down), so that the order told what those documents say.
    LEFT JOIN LATERAL (
        SELECT sum(vs.df) AS df FROM retrieval_vocabularyterm vs
        WHERE vs.collection_id = %(collection)s AND vs.word = lower(unaccent(t.w))
          AND {_READABLE_WORDS}
    ) v ON true
),
words AS MATERIALIZED (
    SELECT
        coalesce(string_agg(w, ' ' ORDER BY ord)
                     FILTER (WHERE df IS NOT NULL AND rarity <= %(and_terms)s), '') AS and_text,
        coalesce(string_agg(w, ' or ' ORDER BY ord)
                     FILTER (WHERE df IS NULL OR df <= %(max_df)s OR rarity <= %(min_terms)s),
                 '') AS or_text,
        coalesce(sum(df) FILTER (WHERE df <= %(max_df)s OR rarity <= %(min_terms)s), 0) AS or_df
    FROM terms
),
q AS MATERIALIZED (  -- computed once, not per row; lets the planner use the GIN index
    SELECT {_tsqueries("and")}, {_tsqueries("or")} FROM words
),
-- Each searched word's rarity in the collection (its idf) and its own query per configuration:
-- a chunk's score is the rarity of the words it matches, so "préstamo" outweighs "empresa".
-- A word the vocabulary lacks ("terminar", where the pages say "término") can still match by
-- its stem: it counts as an average word, neither rare nor common.
rarity AS MATERIALIZED (
    SELECT coalesce(
               ln((%(n_chunks)s + 1.0) / (df + 0.5)),
               (SELECT avg(ln((%(n_chunks)s + 1.0) / (df + 0.5))) FROM terms),
               1.0
           ) AS idf,
           {_tsqueries("one", "w")}
    FROM terms
    WHERE df IS NULL OR df <= %(max_df)s OR rarity <= %(min_terms)s
),
tier1 AS MATERIALIZED ({_tier("and", _TIER1_WORDS, configs)}),
tier2 AS (
    {_tier("or", f"{_TIER1_SHORT} AND NOT {_BY_ROW}", configs)}
    UNION ALL
    {_tier("or", f"{_TIER1_SHORT} AND {_BY_ROW}", configs, by_row=True)}
),
txt AS (
    SELECT id, row_number() OVER (ORDER BY score DESC, id) AS rank
    FROM (
        SELECT id, max(score) AS score
        FROM (SELECT * FROM tier1 UNION ALL SELECT * FROM tier2) both_tiers
        GROUP BY id
        ORDER BY score DESC, id
        LIMIT %(kt)s
    ) best
)"""  # noqa: S608 - composed of constants; every value is a bound parameter


_HYBRID_SQL = """
WITH %TXT%,
vec AS (%VEC%),
fused AS (
    SELECT COALESCE(v.id, t.id) AS id, v.rank AS vrank, t.rank AS trank,
           COALESCE(%(wv)s / (%(k)s + v.rank), 0) + COALESCE(%(wt)s / (%(k)s + t.rank), 0) AS score
    FROM vec v FULL OUTER JOIN txt t ON v.id = t.id
)
SELECT c.id, c.document_id, d.external_id, d.title, c.heading, c.text, c.position, c.area,
       f.vrank, f.trank,
       f.score + CASE WHEN %(area)s <> '' AND c.area = %(area)s THEN %(area_boost)s ELSE 0 END
           AS score,
       d.superseded, d.effective_date, c.fts_config
FROM fused f
JOIN retrieval_chunk c ON c.id = f.id AND c.collection_id = %(collection)s  -- its partition only
JOIN retrieval_document d ON d.id = c.document_id
ORDER BY score DESC, c.id
LIMIT %(limit)s
"""  # noqa: S608 - composed of constants; every value is a bound parameter


# The vector leg (the benchmark times its variants with this same SQL).
VECTOR_LEG_SQL = f"""
    SELECT id, row_number() OVER (ORDER BY distance) AS rank
    FROM (
        SELECT c.id, c.embedding <=> %(qvec)s::vector AS distance
        FROM retrieval_chunk c
        WHERE c.collection_id = %(collection)s
          AND {_READABLE_CHUNK}
        ORDER BY c.embedding <=> %(qvec)s::vector
        LIMIT %(kv)s
    ) nearest
"""  # noqa: S608 - composed of constants; every value is a bound parameter
# Without a query vector (embedder down) the vector leg is empty and full-text answers alone.
_NO_VEC_LEG = "SELECT NULL::bigint AS id, NULL::bigint AS rank WHERE false"
# A vector-only search (`legs="vector"`): the full-text leg is empty likewise.
_NO_TEXT_LEG = f"txt AS ({_NO_VEC_LEG})"
# The full-text leg's ranks as an earlier statement found them (`text_leg_ranks`): the
# search while the query is embedded runs its text leg first, then this with the vector leg.
_GIVEN_TEXT_LEG = """txt AS (
    SELECT * FROM unnest(%(text_ids)s::bigint[], %(text_ranks)s::bigint[]) AS t(id, rank)
)"""
# How a statement gets its full-text leg: computed in it, given, or none.
TextLeg = Literal["sql", "given", "none"]


@cache
def _sql(with_vector: bool, text_leg: TextLeg, configs: Configs) -> str:
    """One search statement: its legs and the configurations its full-text leg tests."""
    legs: dict[TextLeg, str] = {
        "sql": _text_leg(configs).strip(),
        "given": _GIVEN_TEXT_LEG,
        "none": _NO_TEXT_LEG,
    }
    return _HYBRID_SQL.replace("%TXT%", legs[text_leg]).replace(
        "%VEC%", VECTOR_LEG_SQL if with_vector else _NO_VEC_LEG
    )


@cache
def _text_ranks_sql(configs: Configs) -> str:
    """The full-text leg alone, its ranked chunk ids (the first half of
    `search_while_embedding`)."""
    return f"WITH {_text_leg(configs).strip()}\nSELECT id, rank FROM txt"


# How close a corpus word must be to an unknown one to be offered as its spelling
# (pg_trgm similarity). The engine's connections set it as the `%` operator's threshold, so the
# trigram index itself leaves out the weaker candidates (the default 0.3 let ~10x more through,
# each rechecked) instead of the query filtering them afterwards.
SPELLING_SIMILARITY = 0.45

# The vocabulary the full-text leg reads its word statistics from: accent-free lower-case
# words and the number of chunks each appears in, counted per document-group set (the chunk's
# sorted `group_ids`; empty: public) so that a reader's statistics can sum only the sets they
# may read (retrieval.services.VocabularyLexicon). Ingestion and the benchmark run this, in
# one transaction; the version it bumps tells statistics kept between turns to go.
VOCABULARY_REBUILD_SQL = (
    "DELETE FROM retrieval_vocabularyterm WHERE collection_id = %(collection)s",
    """
INSERT INTO retrieval_vocabularyversion (collection_id, version) VALUES (%(collection)s, 1)
ON CONFLICT (collection_id) DO UPDATE SET version = retrieval_vocabularyversion.version + 1
""",
    """
INSERT INTO retrieval_vocabularyterm (collection_id, group_ids, word, df)
SELECT %(collection)s, g.ids, w, count(DISTINCT c.id)
FROM retrieval_chunk c
JOIN retrieval_document d ON d.id = c.document_id
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(DISTINCT x ORDER BY x), '{}'::int[]) FROM unnest(c.group_ids) x
) AS g(ids),
     regexp_split_to_table(
         lower(unaccent(d.title || ' ' || c.heading || ' ' || c.text)), '[^a-z0-9]+'
     ) AS w
WHERE c.collection_id = %(collection)s AND length(w) BETWEEN 2 AND 40
GROUP BY g.ids, w
""",
)


_UNBOUNDED = 2**31 - 1
# The collection size assumed for the words' rarity when the caller does not know it.
UNKNOWN_SIZE = 1000


def text_bounds(params: SearchParams, chunk_count: int | None) -> dict[str, int]:
    """The full-text tiers' parameters for a collection of `chunk_count` chunks.

    Below `text_tiers_from` (or when the size is unknown) there is one tier: every word
    ORed, every match ranked.
    """
    if chunk_count is None or chunk_count < params.text_tiers_from:
        return {"and_terms": 0, "min_terms": 0, "max_df": _UNBOUNDED, "scan": _UNBOUNDED}
    return {
        "and_terms": params.text_and_terms,
        "min_terms": params.text_min_terms,
        "max_df": max(params.text_df_floor, int(params.text_max_df_ratio * chunk_count)),
        "scan": params.text_scan_limit,
    }


def by_row_df(params: SearchParams, chunk_count: int | None, table_share: float) -> int:
    """The words' summed document frequency from which tier 2 tests rows, not the index."""
    if chunk_count is None or table_share <= 0:
        return _UNBOUNDED
    return max(1, int(params.text_by_row_ratio * chunk_count * table_share))


def _search_args(
    request: SearchRequest,
    scope: Scope,
    params: SearchParams,
    *,
    chunk_count: int | None,
    table_share: float,
    readable_chunks: int | None,
) -> dict[str, Any]:
    """The values one search binds (see `hybrid_search` for the sizes)."""
    return {
        "words": fulltext_words(request.text),
        "qvec": _vector_literal(request.vector) if request.vector else None,
        "collection": scope.collection_id,
        **scope.sql_args(),
        "kv": params.vector_candidates,
        "kt": params.text_candidates,
        "rerank": max(params.text_rerank, params.text_candidates),
        **text_bounds(params, chunk_count),
        "n_chunks": readable_chunks or chunk_count or UNKNOWN_SIZE,
        "by_row_df": by_row_df(params, chunk_count, table_share),
        "wv": params.vector_weight,
        "wt": params.text_weight,
        "k": params.rrf_k,
        "area": request.area or "",
        "area_boost": params.area_boost,
        "limit": params.limit,
    }


def _with_text(request: SearchRequest, params: SearchParams) -> bool:
    return params.legs != "vector" and request.full_text


# A chunk's rank in the full-text leg, as `text_leg_ranks` returns it: (chunk id, rank).
TextRanks = list[tuple[int, int]]


def text_leg_ranks(
    conn: Connection[Any],
    request: SearchRequest,
    scope: Scope,
    params: SearchParams,
    *,
    chunk_count: int | None = None,
    table_share: float = 0.0,
    readable_chunks: int | None = None,
    configs: Configs = ALL_CONFIGS,
) -> TextRanks | None:
    """The full-text leg of `hybrid_search` alone: its chunks and their ranks, best first
    (None: the request has no full-text leg). `hybrid_search(..., text_ranks=...)` fuses them
    with the vector leg exactly as the one-statement search does."""
    if not _with_text(request, params):
        return None
    args = _search_args(
        request,
        scope,
        params,
        chunk_count=chunk_count,
        table_share=table_share,
        readable_chunks=readable_chunks,
    )
    sql = _text_ranks_sql(configs)
    return [(int(row[0]), int(row[1])) for row in conn.execute(sql, args).fetchall()]


def hybrid_search(
    conn: Connection[Any],
    request: SearchRequest,
    scope: Scope,
    params: SearchParams,
    *,
    chunk_count: int | None = None,
    table_share: float = 0.0,
    readable_chunks: int | None = None,
    text_ranks: TextRanks | None = None,
    configs: Configs = ALL_CONFIGS,
) -> list[Hit]:
    """Run one hybrid search in a single round trip.

    `chunk_count` (the collection's size) sets which words are too common to search;
    `table_share` (the collection's share of the partition holding it: 1 alone in its own)
    when its full-text leg tests rows one by one rather than read the GIN index;
    `readable_chunks` (what the reader may read of it) weighs the words' rarity, counted,
    like their document frequencies, over what the reader may read only. `text_ranks`, what
    `text_leg_ranks` returned for this request, stands in for the full-text leg. `configs`
    (`collection_configs`) are the text-search configurations the collection's chunks use:
    the full-text leg tests those only.
    """
    args = _search_args(
        request,
        scope,
        params,
        chunk_count=chunk_count,
        table_share=table_share,
        readable_chunks=readable_chunks,
    )
    with_vector = bool(request.vector) and params.legs != "text"
    text_leg: TextLeg = "none"
    if _with_text(request, params):
        text_leg = "sql" if text_ranks is None else "given"
    if not with_vector and text_leg == "none":
        return []
    if text_leg == "given" and text_ranks is not None:
        args["text_ids"] = [chunk for chunk, _ in text_ranks]
        args["text_ranks"] = [rank for _, rank in text_ranks]
    sql = _sql(with_vector, text_leg, configs)
    rows = conn.execute(sql, args).fetchall()
    return [
        Hit(
            chunk_id=row[0],
            document_id=row[1],
            external_id=row[2],
            title=row[3],
            heading=row[4],
            text=row[5],
            position=row[6],
            area=row[7],
            vector_rank=row[8],
            text_rank=row[9],
            score=float(row[10]),
            superseded=bool(row[11]),
            effective=row[12],
            language=_CONFIG_LANGUAGE.get(row[13], ""),
        )
        for row in rows
    ]


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def unit_vector(vector: Sequence[float]) -> tuple[float, ...]:
    """The vector scaled to length 1 (a cosine is then a dot product); zeros stay zeros."""
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(float(x) / norm for x in vector) if norm else tuple(map(float, vector))


# The stored line vectors of some chunks (ingestion normalised them), under the reader's
# permission as the searches apply it: the lines of a chunk they may not read never leave the
# database, whatever ids are asked for. One statement a turn, by the found chunks' ids.
LINE_VECTORS_SQL = f"""
    SELECT l.chunk_id, l.text, l.embedding::real[]
    FROM retrieval_chunkline l
    JOIN retrieval_chunk c ON c.id = l.chunk_id AND c.collection_id = l.collection_id
    WHERE l.collection_id = %(collection)s AND l.chunk_id = ANY(%(chunks)s::bigint[])
      AND {_READABLE_CHUNK}
    ORDER BY l.chunk_id, l.position
"""  # noqa: S608 - constants; every value is bound


def line_vectors_fetch(
    conn: Connection[Any], chunk_ids: Sequence[int], scope: Scope
) -> dict[int, tuple[LineVector, ...]]:
    """Per chunk id, its lines' texts and vectors (`LINE_VECTORS_SQL`)."""
    if not chunk_ids:
        return {}
    args = {"collection": scope.collection_id, "chunks": list(chunk_ids), **scope.sql_args()}
    found: dict[int, list[LineVector]] = {}
    # Binary: a real[] comes back as floats without parsing text (a third of the time).
    for chunk_id, text, vector in conn.execute(LINE_VECTORS_SQL, args, binary=True):
        found.setdefault(int(chunk_id), []).append((text, tuple(vector)))
    return {chunk_id: tuple(lines) for chunk_id, lines in found.items()}


class Searcher(Protocol):
    """What the pipeline asks of the search: `SearchEngine`, or a fake in tests."""

    def search_many(
        self,
        requests: Sequence[SearchRequest],
        scope: Scope,
        params: SearchParams,
        *,
        call: SearchCall | None = None,
    ) -> list[list[Hit]]:
        """Run all requests; results keep the requests' order. `call` (see `cancellable`)
        cancels their statements."""
        ...

    def search_while_embedding(
        self,
        requests: Sequence[SearchRequest],
        scope: Scope,
        params: SearchParams,
        embed: Callable[[], Sequence[Sequence[float]]],
        *,
        call: SearchCall | None = None,
    ) -> list[list[Hit]]:
        """`search_many` for requests whose vectors `embed` computes meanwhile."""
        ...

    def line_vectors(
        self, chunk_ids: Sequence[int], scope: Scope, *, call: SearchCall | None = None
    ) -> dict[int, tuple[LineVector, ...]]:
        """Per chunk id, the stored line vectors of those of the chunks the reader may
        read (`line_vectors_fetch`)."""
        ...


class SearchCancelled(Exception):
    """The search's call was cancelled (`SearchCall.cancel`): its statements were cancelled in
    PostgreSQL, or refused before they started. Not a failure: nobody awaits the result."""


class SearchCall:
    """The statements one call of the engine runs, so that they can be cancelled at once.

    Each statement runs on a pooled connection registered here while it runs (`running`);
    `cancel` refuses any statement not started yet and asks PostgreSQL to cancel those
    running (`Connection.cancel_safe`). A cancelled statement raises `SearchCancelled` in its
    thread, which then returns; its connection is left idle (autocommit), so the pool hands
    it to the next search as it is.
    """

    CANCEL_TIMEOUT_S = 5.0

    def __init__(self) -> None:
        # Held while the running statements are cancelled, so that none of their
        # connections goes back to the pool (and another call's statement) meanwhile.
        self._lock = threading.Lock()
        self._running: set[Connection[Any]] = set()
        self._cancelled = False
        self.cancels_sent = 0  # statements PostgreSQL was asked to cancel

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @contextmanager
    def running(self, conn: Connection[Any]) -> Iterator[None]:
        """Register `conn` while the caller's statements run on it."""
        with self._lock:
            if self._cancelled:
                raise SearchCancelled
            self._running.add(conn)
        try:
            yield
        except QueryCanceled as exc:
            if self._cancelled:  # ours; a statement_timeout's is a failure
                raise SearchCancelled from exc
            raise
        finally:
            with self._lock:
                self._running.discard(conn)

    def refuse(self) -> None:
        """Refuse every statement not started yet (cheap: may run on the event loop)."""
        with self._lock:
            self._cancelled = True

    def cancel(self) -> None:
        """Refuse the statements not started yet and cancel the running ones (blocks on
        the network: run it off the event loop)."""
        with self._lock:
            self._cancelled = True
            for conn in self._running:
                try:
                    conn.cancel_safe(timeout=self.CANCEL_TIMEOUT_S)
                    self.cancels_sent += 1
                except (psycopg.Error, OSError) as exc:  # the statement ends by itself
                    logger.warning("search cancel failed: %s", exc)


_T = TypeVar("_T")


async def cancellable(work: Callable[[SearchCall], _T]) -> _T:
    """Run `work` (a `Searcher` call given the `SearchCall`) on a thread; if the awaiting
    task is cancelled (a stopped turn), the call's statements are cancelled in PostgreSQL.

    The cancel is sent from a thread of its own and not awaited: the stop never waits on
    the database, and work the thread does outside SQL (an embedding) still ends there, but
    starts no statement after it.
    """
    call = SearchCall()
    try:
        return await asyncio.to_thread(work, call)
    except asyncio.CancelledError:
        call.refuse()
        threading.Thread(target=call.cancel, name="search-cancel", daemon=True).start()
        raise


class _Sizes(NamedTuple):
    """What a collection's searches are sized by (`SearchEngine._sizes_for`)."""

    chunks: int
    share: float
    readable: int
    configs: Configs


class SearchEngine:
    """A connection pool plus a thread pool: runs several hybrid searches at once."""

    def __init__(self, conninfo: str, *, pool_size: int, hnsw_ef_search: int) -> None:
        self._ef = hnsw_ef_search
        self.pool: ConnectionPool[Connection[Any]] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            configure=self._configure,
            # No server-side prepared statements: after five runs Postgres would switch to a
            # generic plan that skips the HNSW index (measured at 100k: 1003 -> ~700 ms p50).
            kwargs={"autocommit": True, "prepare_threshold": None},
            # A connection the server closed (a restart) is replaced, not handed to a search.
            check=ConnectionPool.check_connection,
            open=True,
            name="chatrag-search",
        )
        self._executor = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="search")
        self._sizes: dict[int, tuple[float, int, float, Configs]] = {}
        self._readable: dict[Scope, tuple[float, int]] = {}

    def _configure(self, conn: Connection[Any]) -> None:
        # Iterative scans let a permission-filtered HNSW search still return k rows.
        conn.execute(f"SET hnsw.ef_search = {int(self._ef)}")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        conn.execute(f"SET pg_trgm.similarity_threshold = {float(SPELLING_SIMILARITY)}")

    def collection_size(self, collection_id: int, *, max_age: float = 60.0) -> tuple[int, float]:
        """The collection's chunk count and its share of the partition that holds it (1 in
        its own, `retrieval.partitions`); cached a minute."""
        _, count, share, _ = self._collection(collection_id, max_age)
        return count, share

    def collection_configs(self, collection_id: int, *, max_age: float = 60.0) -> Configs:
        """The text-search configurations of the collection's chunks (`configs_of` its
        documents' languages); cached a minute with its size, so a document in a language
        new to the collection is found by its words (its vector, at once) within a minute."""
        return self._collection(collection_id, max_age)[3]

    @contextmanager
    def _connection(self, call: SearchCall | None) -> Iterator[Connection[Any]]:
        """A pooled connection, registered with `call` while in use (so it can be cancelled);
        unregistered before it goes back to the pool."""
        with self.pool.connection() as conn:
            if call is None:
                yield conn
            else:
                with call.running(conn):
                    yield conn

    def _collection(
        self, collection_id: int, max_age: float = 60.0, call: SearchCall | None = None
    ) -> tuple[float, int, float, Configs]:
        cached = self._sizes.get(collection_id)
        if cached is not None and time.monotonic() - cached[0] < max_age:
            return cached
        with self._connection(call) as conn:
            row = conn.execute(
                """SELECT (SELECT count(*) FROM retrieval_chunk WHERE collection_id = %(c)s),
                          (SELECT reltuples FROM pg_class WHERE oid = (
                               SELECT tableoid FROM retrieval_chunk
                               WHERE collection_id = %(c)s LIMIT 1)),
                          (SELECT array_agg(DISTINCT language) FROM retrieval_document
                           WHERE collection_id = %(c)s)""",
                {"c": collection_id},
            ).fetchone()
        count = int(row[0]) if row else 0
        total = float(row[1]) if row and row[1] is not None else -1.0
        share = min(count / total, 1.0) if total > 0 else 1.0  # never analysed: assume alone
        configs = configs_of((row[2] or []) if row else [])
        self._sizes[collection_id] = entry = (time.monotonic(), count, share, configs)
        return entry

    def chunk_count(self, collection_id: int) -> int:
        """How many chunks a collection has (cached a minute: it only sizes term filters)."""
        return self.collection_size(collection_id)[0]

    def readable_chunks(
        self, scope: Scope, *, max_age: float = 60.0, call: SearchCall | None = None
    ) -> int:
        """How many chunks of the collection the reader may read; cached a minute (it only
        weighs the words' rarity)."""
        cached = self._readable.get(scope)
        if cached is not None and time.monotonic() - cached[0] < max_age:
            return cached[1]
        with self._connection(call) as conn:
            args = {"collection": scope.collection_id, **scope.sql_args()}
            row = conn.execute(READABLE_CHUNKS_SQL, args).fetchone()
        count = int(row[0]) if row else 0
        self._readable[scope] = (time.monotonic(), count)
        return count

    def _sizes_for(self, scope: Scope, call: SearchCall | None = None) -> _Sizes:
        _, count, share, configs = self._collection(scope.collection_id, call=call)
        return _Sizes(count, share, self.readable_chunks(scope, call=call), configs)

    def search(self, request: SearchRequest, scope: Scope, params: SearchParams) -> list[Hit]:
        return self._search(request, scope, params, self._sizes_for(scope))

    def _search(
        self,
        request: SearchRequest,
        scope: Scope,
        params: SearchParams,
        size: _Sizes,
        text_ranks: TextRanks | None = None,
        call: SearchCall | None = None,
    ) -> list[Hit]:
        with self._connection(call) as conn:
            return hybrid_search(
                conn,
                request,
                scope,
                params,
                chunk_count=size.chunks,
                table_share=size.share,
                readable_chunks=size.readable,
                text_ranks=text_ranks,
                configs=size.configs,
            )

    def _text_ranks(
        self,
        request: SearchRequest,
        scope: Scope,
        params: SearchParams,
        size: _Sizes,
        call: SearchCall | None = None,
    ) -> TextRanks | None:
        with self._connection(call) as conn:
            return text_leg_ranks(
                conn,
                request,
                scope,
                params,
                chunk_count=size.chunks,
                table_share=size.share,
                readable_chunks=size.readable,
                configs=size.configs,
            )

    def search_many(
        self,
        requests: Sequence[SearchRequest],
        scope: Scope,
        params: SearchParams,
        *,
        call: SearchCall | None = None,
    ) -> list[list[Hit]]:
        """Run all requests concurrently; results keep the requests' order. Raises
        `SearchCancelled` when `call` was cancelled."""
        size = self._sizes_for(scope, call)  # once, not per thread
        if len(requests) == 1:
            return [self._search(requests[0], scope, params, size, call=call)]
        futures = [
            self._executor.submit(self._search, r, scope, params, size, call=call) for r in requests
        ]
        return [f.result() for f in futures]

    def search_while_embedding(
        self,
        requests: Sequence[SearchRequest],
        scope: Scope,
        params: SearchParams,
        embed: Callable[[], Sequence[Sequence[float]]],
        *,
        call: SearchCall | None = None,
    ) -> list[list[Hit]]:
        """`search_many` for requests whose vectors `embed` computes (one per request, in
        order; an empty one: no vector leg), with the same hits.

        The full-text legs run on the pool while `embed` runs in this thread (the database
        and the embedder each take a core); then each request's vector leg runs and is fused
        with its full-text leg's ranks in a second statement. Searching only once the
        vectors were there cost a turn the embedding and the full-text legs one after the
        other.
        """
        size = self._sizes_for(scope, call)
        text = [
            self._executor.submit(self._text_ranks, r, scope, params, size, call) for r in requests
        ]
        try:
            vectors = embed()
        finally:  # the text legs end before the turn goes on, whatever the embedder did
            ranks = [f.result() for f in text]
        searches = [
            self._executor.submit(
                self._search, replace(r, vector=v), scope, params, size, text_ranks, call
            )
            for r, v, text_ranks in zip(requests, vectors, ranks, strict=True)
        ]
        return [f.result() for f in searches]

    def line_vectors(
        self, chunk_ids: Sequence[int], scope: Scope, *, call: SearchCall | None = None
    ) -> dict[int, tuple[LineVector, ...]]:
        with self._connection(call) as conn:
            return line_vectors_fetch(conn, chunk_ids, scope)

    def close(self) -> None:
        self._executor.shutdown(wait=False)
        self.pool.close()


_engines: dict[str, SearchEngine] = {}
_engines_lock = threading.Lock()


def get_engine(conninfo: str, *, pool_size: int, hnsw_ef_search: int) -> SearchEngine:
    """Return the process-wide engine for a database (one pool per conninfo)."""
    with _engines_lock:
        engine = _engines.get(conninfo)
        if engine is None:
            engine = _engines[conninfo] = SearchEngine(
                conninfo, pool_size=pool_size, hnsw_ef_search=hnsw_ef_search
            )
        return engine


def close_engines() -> None:
    """Close every pool (tests and shutdown)."""
    with _engines_lock:
        for engine in _engines.values():
            engine.close()
        _engines.clear()
