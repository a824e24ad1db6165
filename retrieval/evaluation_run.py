"""Run judged tasks through the real retrieval pipeline and score them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from retrieval.evaluation import EvalTask
from retrieval.models import Collection
from retrieval.pipeline.fusion import ranked_documents
from retrieval.pipeline.llm import ChatModel
from retrieval.pipeline.metrics import mrr_at, ndcg_at, percentile, precision_recall, recall_at
from retrieval.pipeline.retrieve import RewriteMode, retrieve
from retrieval.pipeline.search import Scope
from retrieval.services import (
    VocabularyLexicon,
    glossary_for,
    query_embedder_for,
    retrieval_settings,
    search_engine,
)


@dataclass
class ModeReport:
    mode: str
    ks: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    clarified: list[bool] = field(default_factory=list)
    expected_clarification: list[bool] = field(default_factory=list)

    def _scores(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        judged = [r for r in rows if r["relevant"]]
        n = len(judged)
        out: dict[str, Any] = {"n": n}
        for k in self.ks:
            out[f"recall@{k}"] = sum(r[f"recall@{k}"] for r in judged) / n if n else 0.0
        out["mrr@10"] = sum(r["mrr@10"] for r in judged) / n if n else 0.0
        out["ndcg@10"] = sum(r["ndcg@10"] for r in judged) / n if n else 0.0
        return out

    def summary(self) -> dict[str, Any]:
        by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in self.rows:
            by_category[row["category"]].append(row)
        precision, recall = precision_recall(self.clarified, self.expected_clarification)
        return {
            "overall": self._scores(self.rows),
            "by_category": {c: self._scores(rows) for c, rows in sorted(by_category.items())},
            "clarification": {"precision": precision, "recall": recall},
            "latency_ms": {
                stage: {"p50": percentile(v, 50), "p95": percentile(v, 95)}
                for stage, v in self.latencies.items()
            },
        }


async def evaluate_mode(
    *,
    tasks: Sequence[EvalTask],
    collection: Collection,
    mode: RewriteMode,
    ks: list[int],
    language: str | None,
    model: ChatModel | None,
    on_task: Callable[[], object] | None = None,
) -> ModeReport:
    """Score every task with one rewrite mode (tasks run one at a time for clean latencies)."""
    engine = await sync_to_async(search_engine)()
    glossary = await sync_to_async(glossary_for)(collection=collection)
    settings = await sync_to_async(retrieval_settings)(mode=mode)
    embedder = await sync_to_async(query_embedder_for)(collection=collection)
    lexicon = VocabularyLexicon(engine, collection.id)
    scope = Scope(collection_id=collection.id, see_everything=True)
    report = ModeReport(mode=mode, ks=ks)
    depth = max([10, *ks])
    for task in tasks:
        outcome = await retrieve(
            question=task.question,
            history=task.history,
            glossary=glossary,
            scope=scope,
            engine=engine,
            embedder=embedder,
            lexicon=lexicon,
            settings=settings,
            model=model,
            language=task.language or language,
        )
        ranked = ranked_documents(outcome.merged)[:depth]
        clarified = outcome.rewrite.needs_clarification
        row: dict[str, Any] = {
            "id": task.id,
            "mode": mode,
            "category": task.category,
            "queries": [q.text for q in outcome.queries],
            "ranked": ranked,
            "clarified": clarified,
            "relevant": sorted(task.relevant),
        }
        for k in ks:
            row[f"recall@{k}"] = recall_at(ranked, task.relevant, k)
        row["mrr@10"] = mrr_at(ranked, task.relevant, 10)
        row["ndcg@10"] = ndcg_at(ranked, task.relevant, 10)
        report.rows.append(row)
        report.clarified.append(clarified)
        # A task with no relevant documents is one where asking back is right.
        report.expected_clarification.append(task.expect_clarification or not task.relevant)
        for stage, ms in outcome.timings_ms.items():
            report.latencies[stage].append(ms)
        report.latencies["total"].append(sum(outcome.timings_ms.values()))
        if on_task:
            on_task()
    return report
