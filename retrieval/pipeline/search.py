"""Hybrid search in PostgreSQL: pgvector + full-text, fused by RRF in one SQL statement.

- Both legs filter by collection and by the reader's groups inside the SQL, so a document
  the user may not read never leaves the database.
- The full-text leg ORs the query's words (websearch syntax, bound as a parameter) against
  the stored, GIN-indexed vectors in each chunk's own language configuration, so long
  natural questions still match and chunks matching more words rank higher.
- Several queries run at once on pooled connections (threads: psycopg releases the GIL
  while it waits on the server).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from psycopg import Connection
from psycopg_pool import ConnectionPool

from .fusion import Hit

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


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


@dataclass(frozen=True)
class SearchRequest:
    """One query to run: its text (for full-text), its vector, and an optional area hint."""

    text: str
    vector: Sequence[float]
    area: str | None = None


@dataclass(frozen=True)
class Scope:
    """Where to search and what the reader may see (from the authenticated session)."""

    collection_id: int
    group_ids: tuple[int, ...] = ()
    see_everything: bool = False  # superusers only


def fulltext_query(text: str, max_terms: int = 32) -> str:
    """Build a websearch_to_tsquery string that ORs the words of `text`.

    Only letters and digits survive, so no operator can be injected; the result is still
    passed to SQL as a bound parameter.
    """
    words: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFC", text)):
        lowered = word.lower()
        if lowered in {"or", "and", "not"} or lowered in words:
            continue
        words.append(lowered)
        if len(words) >= max_terms:
            break
    return " or ".join(words)


_HYBRID_SQL = """
WITH q AS MATERIALIZED (  -- computed once, not per row; lets the planner use the GIN index
    SELECT websearch_to_tsquery('portuguese', unaccent(%(qtext)s)) AS pt,
           websearch_to_tsquery('spanish', unaccent(%(qtext)s)) AS es,
           websearch_to_tsquery('english', unaccent(%(qtext)s)) AS en,
           websearch_to_tsquery('simple', unaccent(%(qtext)s)) AS si
),
vec AS (%VEC%),
txt AS (
    SELECT id, row_number() OVER (ORDER BY score DESC, id) AS rank
    FROM (
        SELECT c.id, ts_rank_cd(c.search_vector, CASE c.fts_config
                   WHEN 'portuguese' THEN q.pt WHEN 'spanish' THEN q.es
                   WHEN 'english' THEN q.en ELSE q.si END, 1) AS score
        FROM retrieval_chunk c, q
        WHERE c.collection_id = %(collection)s
          AND (%(all)s OR c.is_public OR c.group_ids && %(groups)s::int[])
          AND (   (c.fts_config = 'portuguese' AND c.search_vector @@ q.pt)
               OR (c.fts_config = 'spanish' AND c.search_vector @@ q.es)
               OR (c.fts_config = 'english' AND c.search_vector @@ q.en)
               OR (c.fts_config = 'simple' AND c.search_vector @@ q.si))
        ORDER BY score DESC, c.id
        LIMIT %(kt)s
    ) matched
),
fused AS (
    SELECT COALESCE(v.id, t.id) AS id, v.rank AS vrank, t.rank AS trank,
           COALESCE(%(wv)s / (%(k)s + v.rank), 0) + COALESCE(%(wt)s / (%(k)s + t.rank), 0) AS score
    FROM vec v FULL OUTER JOIN txt t ON v.id = t.id
)
SELECT c.id, c.document_id, d.external_id, d.title, c.heading, c.text, c.position, c.area,
       f.vrank, f.trank,
       f.score + CASE WHEN %(area)s <> '' AND c.area = %(area)s THEN %(area_boost)s ELSE 0 END
           AS score
FROM fused f
JOIN retrieval_chunk c ON c.id = f.id
JOIN retrieval_document d ON d.id = c.document_id
ORDER BY score DESC, c.id
LIMIT %(limit)s
"""


_VEC_LEG = """
    SELECT id, row_number() OVER (ORDER BY distance) AS rank
    FROM (
        SELECT c.id, c.embedding <=> %(qvec)s::vector AS distance
        FROM retrieval_chunk c
        WHERE c.collection_id = %(collection)s
          AND (%(all)s OR c.is_public OR c.group_ids && %(groups)s::int[])
        ORDER BY c.embedding <=> %(qvec)s::vector
        LIMIT %(kv)s
    ) nearest
"""
# Without a query vector (embedder down) the vector leg is empty and full-text answers alone.
_NO_VEC_LEG = "SELECT NULL::bigint AS id, NULL::bigint AS rank WHERE false"
_SQL_WITH_VECTOR = _HYBRID_SQL.replace("%VEC%", _VEC_LEG)
_SQL_TEXT_ONLY = _HYBRID_SQL.replace("%VEC%", _NO_VEC_LEG)


def hybrid_search(
    conn: Connection[Any], request: SearchRequest, scope: Scope, params: SearchParams
) -> list[Hit]:
    """Run one hybrid search in a single round trip."""
    args = {
        "qtext": fulltext_query(request.text),
        "qvec": _vector_literal(request.vector),
        "collection": scope.collection_id,
        "all": scope.see_everything,
        "groups": list(scope.group_ids),
        "kv": params.vector_candidates,
        "kt": params.text_candidates,
        "wv": params.vector_weight,
        "wt": params.text_weight,
        "k": params.rrf_k,
        "area": request.area or "",
        "area_boost": params.area_boost,
        "limit": params.limit,
    }
    sql = _SQL_WITH_VECTOR if request.vector else _SQL_TEXT_ONLY
    if not request.vector:
        args["qvec"] = None
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
        )
        for row in rows
    ]


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


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
            open=True,
            name="chatrag-search",
        )
        self._executor = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="search")

    def _configure(self, conn: Connection[Any]) -> None:
        # Iterative scans let a permission-filtered HNSW search still return k rows.
        conn.execute(f"SET hnsw.ef_search = {int(self._ef)}")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")

    def search(self, request: SearchRequest, scope: Scope, params: SearchParams) -> list[Hit]:
        with self.pool.connection() as conn:
            return hybrid_search(conn, request, scope, params)

    def search_many(
        self, requests: Sequence[SearchRequest], scope: Scope, params: SearchParams
    ) -> list[list[Hit]]:
        """Run all requests concurrently; results keep the requests' order."""
        if len(requests) == 1:
            return [self.search(requests[0], scope, params)]
        futures = [self._executor.submit(self.search, r, scope, params) for r in requests]
        return [f.result() for f in futures]

    def search_sequential(
        self, requests: Sequence[SearchRequest], scope: Scope, params: SearchParams
    ) -> list[list[Hit]]:
        """The same searches one after another (for the benchmark's comparison)."""
        return [self.search(r, scope, params) for r in requests]

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
