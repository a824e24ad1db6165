"""Merge the ranked hits of several queries into one list (pure: no I/O).

Each hit remembers which queries found it, at which rank, and its rank in each search leg,
so the trace can show why a passage was chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Literal

from .types import SearchQuery

FusionStrategy = Literal["rrf", "max"]


@dataclass(frozen=True)
class Hit:
    """One chunk returned by one hybrid search, with its ranks in both legs."""

    chunk_id: int
    document_id: int
    external_id: str
    title: str
    heading: str
    text: str
    position: int
    area: str
    vector_rank: int | None
    text_rank: int | None
    score: float
    # The document's version: replaced by a newer one, and the date it took effect.
    superseded: bool = False
    effective: date | None = None
    language: str = ""  # the document's language code, "" when not known


@dataclass(frozen=True)
class QueryMatch:
    """How one query found a merged hit."""

    query: int  # index into the turn's query list
    rank: int  # 1-based rank within that query's results
    vector_rank: int | None
    text_rank: int | None
    score: float


@dataclass
class MergedHit:
    hit: Hit
    score: float
    matches: list[QueryMatch] = field(default_factory=list)

    @property
    def chunk_id(self) -> int:
        return self.hit.chunk_id


def merge_results(
    queries: Sequence[SearchQuery],
    results: Sequence[Sequence[Hit]],
    *,
    strategy: FusionStrategy = "rrf",
    rrf_k: int = 60,
) -> list[MergedHit]:
    """Dedupe by chunk and rank by the chosen strategy.

    - "rrf": sum over queries of weight / (k + rank): passages found by several queries rise.
    - "max": best weight * (score / best score of that query): each sub-question's champion
      competes on equal terms, which suits decomposed multi-topic messages.
    """
    if len(queries) != len(results):
        raise ValueError("one result list per query is required")
    merged: dict[int, MergedHit] = {}
    support: dict[int, float] = {}  # "max": what all the queries gave, for ties at the top
    for index, (query, hits) in enumerate(zip(queries, results, strict=True)):
        top = max((h.score for h in hits), default=0.0) or 1.0
        for rank, hit in enumerate(hits, start=1):
            if strategy == "rrf":
                contribution = query.weight / (rrf_k + rank)
            else:
                contribution = query.weight * hit.score / top
            entry = merged.get(hit.chunk_id)
            if entry is None:
                entry = merged[hit.chunk_id] = MergedHit(hit=hit, score=0.0)
            entry.matches.append(
                QueryMatch(index, rank, hit.vector_rank, hit.text_rank, round(hit.score, 6))
            )
            if strategy == "rrf":
                entry.score += contribution
            else:
                entry.score = max(entry.score, contribution)
                support[hit.chunk_id] = support.get(hit.chunk_id, 0.0) + contribution
    # Two sub-questions' champions tie at the top: the one the other queries found too
    # comes first (one passage often answers both halves of "where was the cotton gin
    # invented and where is it used today").
    return sorted(
        merged.values(),
        key=lambda m: (-m.score, -support.get(m.hit.chunk_id, 0.0), m.hit.chunk_id),
    )


def cut_passages(
    merged: Sequence[MergedHit], *, limit: int, max_per_document: int
) -> list[MergedHit]:
    """Keep the best `limit` passages with at most `max_per_document` from one document."""
    kept: list[MergedHit] = []
    per_document: dict[int, int] = {}
    for item in merged:
        count = per_document.get(item.hit.document_id, 0)
        if count >= max_per_document:
            continue
        per_document[item.hit.document_id] = count + 1
        kept.append(item)
        if len(kept) >= limit:
            break
    return kept


def ranked_documents(merged: Sequence[MergedHit]) -> list[str]:
    """Document ids in order of their best chunk (a document counts once)."""
    seen: dict[str, None] = {}
    for item in merged:
        seen.setdefault(item.hit.external_id, None)
    return list(seen)
