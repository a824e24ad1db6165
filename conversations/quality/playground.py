"""The retrieval playground: one question (and optional history) through the turn's pipeline.

`manage.py ask` and the staff playground page call `playground_run`; it calls the same
entry point as a turn and the evaluation (`retrieval.pipeline.plan.plan_turn`)
and builds the answer with the evaluation's `turn_answer_built` (the turn's own steps, without
streaming). Nothing is stored.

- Without a reader it searches as someone who may read every public document and nothing
  else (no groups, not a superuser); with one, exactly as that user's turn would.
- Several configurations run in one event loop (the model's HTTP client lives in it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User

from conversations.quality.evaluate import turn_answer_built
from retrieval.models import Collection
from retrieval.pipeline.llm import ChatModel
from retrieval.pipeline.model_stages import HydeRecord, RerankRecord
from retrieval.pipeline.plan import TurnBackends, TurnPlan, TurnRequest, plan_turn
from retrieval.pipeline.respond import Answer
from retrieval.pipeline.retrieve import RetrievalOutcome, RewriteMode
from retrieval.pipeline.search import Legs, Scope
from retrieval.pipeline.types import HistoryMessage, RewriteResult, SearchQuery
from retrieval.services import (
    default_collection,
    retrieval_settings,
    scope_for_user,
    turn_backends_for,
    turn_request_for,
)

HITS_PER_QUERY = 10


@dataclass(frozen=True)
class PlaygroundConfig:
    """One way to run the question: rewrite mode, search legs, the optional model stages."""

    rewrite: RewriteMode = "rules"
    legs: Legs = "hybrid"
    rerank: bool = False
    hyde: bool = False

    @property
    def label(self) -> str:
        stages = [name for name, on in (("hyde", self.hyde), ("rerank", self.rerank)) if on]
        return f"{self.rewrite} · {self.legs}" + "".join(f" · {s}" for s in stages)


@dataclass
class PlaygroundRun:
    """What one configuration retrieved and answered."""

    config: PlaygroundConfig
    question: str
    reader: str
    outcome: RetrievalOutcome
    answer: str
    answer_kind: str  # "extractive", "model", "small talk", "clarification"
    # Why these lines (the extractive answer's): see `answer_why`; None for other kinds.
    why: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The run as JSON: what `ask --json` prints and the staff page shows."""
        outcome = self.outcome
        shown = {m.hit.chunk_id for m in outcome.passages}
        rewrite = outcome.rewrite
        return {
            "config": {
                "rewrite": self.config.rewrite,
                "legs": self.config.legs,
                "rerank": self.config.rerank,
                "hyde": self.config.hyde,
            },
            "reader": self.reader,
            "question": self.question,
            "masked_question": outcome.masked_question,
            "window": [{"role": m.role, "text": m.text} for m in outcome.masked_window],
            "rewrite": rewrite.to_dict(),
            "queries": [
                {
                    "n": index + 1,
                    "text": query.text,
                    "type": query.type,
                    "weight": query.weight,
                    "reading": query.reading,
                    "area": query.area,
                    "reason": query_reason(query, rewrite),
                    "hits": query_hits(outcome, index, shown),
                }
                for index, query in enumerate(outcome.queries)
            ],
            "sources": [
                {
                    "n": number,
                    "chunk": m.hit.chunk_id,
                    "document": m.hit.external_id,
                    "title": m.hit.title,
                    "section": m.hit.heading,
                    "fused": round(m.score, 6),
                    "snippet": _snippet(m.hit.text),
                }
                for number, m in enumerate(outcome.passages, start=1)
            ],
            "sources_shown": self.answer_kind not in {"small talk", "clarification"},
            "answer": {"text": self.answer, "kind": self.answer_kind, "why": self.why},
            "hyde": _stage(outcome.hyde),
            "rerank": _stage(outcome.rerank),
            "reranked": _reranked(outcome),
            "errors": list(outcome.errors),
            "timings_ms": dict(outcome.timings_ms),
        }


def _stage(record: HydeRecord | RerankRecord | None) -> dict[str, Any] | None:
    return None if record is None else {**record.to_dict(), "note": record.note()}


def _reranked(outcome: RetrievalOutcome) -> list[dict[str, Any]]:
    """The rerank's window in its final order, each with its place in the fused order."""
    record = outcome.rerank
    if record is None or not record.after:
        return []
    by_chunk = {m.hit.chunk_id: m for m in outcome.merged}
    out = []
    for rank, chunk in enumerate(record.after, start=1):
        item = by_chunk.get(chunk)
        if item is None:
            continue
        out.append(
            {
                "rank": rank,
                "fused_rank": record.before.index(chunk) + 1,
                "chunk": chunk,
                "document": item.hit.external_id,
                "section": item.hit.heading,
                "fused": round(item.score, 6),
            }
        )
    return out


def query_hits(outcome: RetrievalOutcome, index: int, shown: set[int]) -> list[dict[str, Any]]:
    """The hits of query `index`, in its own order, with both legs' ranks and the fused score."""
    found = [
        (match, merged)
        for merged in outcome.merged
        for match in merged.matches
        if match.query == index
    ]
    found.sort(key=lambda pair: pair[0].rank)
    return [
        {
            "rank": match.rank,
            "vector_rank": match.vector_rank,
            "text_rank": match.text_rank,
            "score": match.score,
            "fused": round(merged.score, 6),
            "chunk": merged.hit.chunk_id,
            "document": merged.hit.external_id,
            "title": merged.hit.title,
            "section": merged.hit.heading,
            "passage": merged.hit.chunk_id in shown,
        }
        for match, merged in found[:HITS_PER_QUERY]
    ]


_TYPE_REASONS = {
    "normalize": "the question, cleaned (spelling, glossary)",
    "expand": "the question expanded with the glossary or the conversation",
    "decompose": "one question of a message that asks several",
    "multi_query": "another phrasing of the question",
    "hyde": "a hypothetical answer (never shown as a source)",
}


def query_reason(query: SearchQuery, rewrite: RewriteResult) -> str:
    """Why this query was searched, in a few words (from its type, reading and backend)."""
    return reason_for_query(
        query_type=query.type, reading=query.reading, backend=rewrite.backend, topic=rewrite.topic
    )


def reason_for_query(
    *, query_type: str, reading: str | None, backend: str, topic: str | None
) -> str:
    """`query_reason` from a query's and its rewrite's recorded values (a stored trace's too:
    the fidelity review shows it)."""
    if query_type == "original":
        return "the user's own words, a safety net at low weight"
    if backend == "none":
        return "the question as typed (no rewrite)"
    if backend == "last-turn":
        return "the previous user message joined to this one"
    if reading == "contextual":
        carried = f" ({topic})" if topic else ""
        return f"the turn read with the conversation's topic{carried}"
    if reading == "standalone":
        return "the turn read on its own"
    reason = _TYPE_REASONS.get(query_type, query_type)
    return f"model: {reason}" if backend == "llm" else reason


def _snippet(text: str, limit: int = 280) -> str:
    flat = " ".join(text.split())
    return flat[:limit] + ("…" if len(flat) > limit else "")


def reader_scope(*, reader: User | None, collection: Collection) -> tuple[Scope, str]:
    """The scope to search with, and who that is in words."""
    if reader is None:
        return Scope(collection_id=collection.id), "a reader of every public document (no groups)"
    groups = sorted(reader.groups.values_list("name", flat=True))
    who = reader.get_username()
    if reader.is_superuser:
        who += " (superuser: every document)"
    elif groups:
        who += f" (groups: {', '.join(groups)})"
    return scope_for_user(user=reader, collection=collection), who


def playground_run(
    *,
    question: str,
    history: Sequence[HistoryMessage] = (),
    reader: User | None = None,
    configs: Sequence[PlaygroundConfig] = (PlaygroundConfig(),),
) -> list[PlaygroundRun]:
    """Run `question` once per configuration, as `reader` would (sync: commands and views)."""
    collection = default_collection()
    scope, who = reader_scope(reader=reader, collection=collection)
    base = retrieval_settings()
    requests = {
        config: turn_request_for(
            question=question,
            history=history,
            collection=collection,
            scope=scope,
            reader=reader,
            settings=replace(
                retrieval_settings(mode=config.rewrite, hyde=config.hyde, rerank=config.rerank),
                search=replace(base.search, legs=config.legs),
            ),
        )
        for config in configs
    }
    backends = turn_backends_for(collection=collection, scope=scope, cached=False)
    outcomes = async_to_sync(_run_all)(requests, backends)
    return [
        PlaygroundRun(
            config=config,
            question=question,
            reader=who,
            outcome=outcome,
            answer=answer,
            answer_kind=kind,
            why=why,
        )
        for config, (outcome, answer, kind, why) in zip(configs, outcomes, strict=True)
    ]


async def _run_all(
    requests: dict[PlaygroundConfig, TurnRequest], backends: TurnBackends
) -> list[tuple[RetrievalOutcome, str, str, dict[str, Any] | None]]:
    out = []
    for request in requests.values():
        plan = await plan_turn(request, backends)
        answer, kind, why = await _reply(plan, backends.model)
        out.append((plan.outcome, answer, kind, why))
    return out


async def _reply(plan: TurnPlan, model: ChatModel | None) -> tuple[str, str, dict[str, Any] | None]:
    """What the turn would say: a small-talk reply, a question back, or the answer (and,
    for the extractive answer, why its lines)."""
    if plan.kind == "small_talk":
        return plan.reply or "", "small talk", None
    if plan.kind == "ask_back":
        options = " | ".join(plan.options)
        text = (plan.reply or "") + (f"\n(options: {options})" if options else "")
        return text, "clarification", None
    answer = await turn_answer_built(outcome=plan.outcome, language=plan.language, model=model)
    if answer.kind == "model":
        return answer.text, "model", None
    return answer.text, "extractive", answer_why(answer)


def answer_why(answer: Answer) -> dict[str, Any]:
    """The extractive answer's lines with their scores, as JSON (ask --explain, staff)."""
    why = answer.why()
    return {k: why[k] for k in ("not_found", "coverage", "lines")}
