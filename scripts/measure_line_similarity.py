"""Is the line that holds a judged fact the one the semantic feature ranks first?

For each judged turn with facts (`expected_answer_contains`) of ptes-dev and ptes-aurora, run
through the evaluation's own path (rule rewriter, no model), the candidate lines of the
passages the answer reads are ranked by `line_similarity` (the stored line vectors against the
searched queries' vectors) and, for comparison, by today's hand score (the lines the
extractive answer chose, best score first). A fact counts where some candidate line holds it
(a fact no line holds is the search's loss, not the line choice's); it is in the top 1 / top 3
when one of the first one / three lines holds it.

    .venv/bin/python scripts/measure_line_similarity.py [--context] [ptes-dev ptes-aurora]

`--context` ranks by vectors of the lines embedded with their page title and section heading
before them (embedded here, not stored): whether ingestion should embed lines that way.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")

import django  # noqa: E402

django.setup()

from conversations.quality.datasets import (  # noqa: E402
    evaluation_collection_load,
    glossary_load,
    tasks_load,
)
from conversations.quality.evaluate import evaluate_mode  # noqa: E402
from conversations.quality.scoring import contains  # noqa: E402
from retrieval.embeddings import get_embedder  # noqa: E402
from retrieval.pipeline.answer import (  # noqa: E402
    Passage,
    context_passages,
    extractive_choice,
    line_similarity,
    query_rankings,
)
from retrieval.pipeline.answer.extractive import (  # noqa: E402
    _document,
    _lines,
    _whole_sentences,
)
from retrieval.pipeline.plan import TurnPlan  # noqa: E402
from retrieval.pipeline.search import unit_vector  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
SETS = {name: SHARED / name for name in ("ptes-dev", "ptes-aurora")}


def _candidates(plan: TurnPlan) -> tuple[list[Passage], list[Any]]:
    """The passages the answer reads and their candidate lines, as the answer splits them."""
    outcome = plan.outcome
    passages = context_passages(outcome.passages, outcome.merged, line_vectors=outcome.line_vectors)
    order: dict[str, int] = {}
    for p in passages:
        order.setdefault(_document(p), len(order))
    lines = _whole_sentences([x for p in passages for x in _lines(p, order[_document(p)], "pt")])
    return passages, lines


def _in_context(line: Any) -> str:
    """A line with its page title and section heading before it (the `--context` variant)."""
    return f"{line.passage.title} — {line.passage.heading}\n{line.text}"


def _ranks(
    plan: TurnPlan, facts: list[str], context: dict[str, tuple[float, ...]] | None
) -> dict[str, Any]:
    """Per fact some candidate line holds: its best rank by similarity and by hand score."""
    outcome = plan.outcome
    passages, lines = _candidates(plan)
    vectors = outcome.query_vectors

    def similarity(line: Any) -> float | None:
        if context is None:
            return line_similarity(line.text, line.passage, vectors)
        own = context[_in_context(line)]
        return max(sum(a * b for a, b in zip(own, q, strict=True)) for q in vectors.values())

    similar = sorted(lines, key=lambda x: -(similarity(x) or -1.0))
    missing = sum(1 for x in lines if similarity(x) is None)
    built = extractive_choice(
        question=outcome.masked_question,
        queries=[q.text for q in outcome.queries if q.type != "hyde"],
        passages=passages,
        language=plan.language,
        rewrite=outcome.rewrite,
        rankings=query_rankings(outcome.queries, outcome.merged),
        history=outcome.masked_window,
        lead=outcome.pinned,
        query_vectors=vectors,
    )
    hand = [x.text for x in sorted(built.lines, key=lambda x: -x.score)]
    # The same ranking inside the first page found alone (page rank is another feature).
    first = [x for x in similar if x.rank == 0]
    out: dict[str, Any] = {"lines": len(lines), "missing": missing, "facts": []}
    for fact in facts:
        if not any(contains(x.text, fact) for x in lines):
            continue
        semantic = next(i for i, x in enumerate(similar) if contains(x.text, fact))
        chosen = next((i for i, text in enumerate(hand) if contains(text, fact)), None)
        on_first = next((i for i, x in enumerate(first) if contains(x.text, fact)), None)
        out["facts"].append((semantic, chosen, on_first))
    return out


async def _measure(name: str, with_context: bool) -> None:
    folder = SETS[name]
    loaded = await asyncio.to_thread(
        evaluation_collection_load,
        corpus=folder / "corpus.jsonl",
        embedder=get_embedder(),
        glossary=glossary_load(folder / "glossary.json"),
    )
    tasks = tasks_load(folder / "tasks.jsonl")
    plans: list[TurnPlan] = []
    await evaluate_mode(
        tasks=tasks,
        collection=loaded.collection,
        mode="rules",
        ks=[5, 10],
        language=None,
        model=None,
        on_plan=plans.append,
    )
    context: dict[str, tuple[float, ...]] | None = None
    if with_context:  # embed each candidate line with its title and heading, here only
        texts = sorted(
            {
                _in_context(x)
                for task, plan in zip(tasks, plans, strict=True)
                if task.expected_answer_contains and plan.kind == "answer"
                for x in _candidates(plan)[1]
            }
        )
        found = get_embedder().embed_passages(texts)
        context = {t: unit_vector(v) for t, v in zip(texts, found, strict=True)}
    facts = lines = missing = turns = 0
    counts = {"sim1": 0, "sim3": 0, "hand1": 0, "hand3": 0, "either3": 0, "sim3_hand_missed": 0}
    counts |= {"first": 0, "first1": 0, "first3": 0}
    for task, plan in zip(tasks, plans, strict=True):
        if not task.expected_answer_contains or plan.kind != "answer":
            continue
        ranked = _ranks(plan, list(task.expected_answer_contains), context)
        turns += 1
        lines += ranked["lines"]
        missing += ranked["missing"]
        for semantic, chosen, on_first in ranked["facts"]:
            facts += 1
            if on_first is not None:
                counts["first"] += 1
                counts["first1"] += on_first < 1
                counts["first3"] += on_first < 3
            counts["sim1"] += semantic < 1
            counts["sim3"] += semantic < 3
            counts["hand1"] += chosen is not None and chosen < 1
            hand3 = chosen is not None and chosen < 3
            counts["hand3"] += hand3
            counts["either3"] += hand3 or semantic < 3
            counts["sim3_hand_missed"] += not hand3 and semantic < 3
    share = {k: v / facts if facts else 0.0 for k, v in counts.items()}
    print(
        f"{name}{' (lines embedded with title and heading)' if with_context else ''}: "
        f"{turns} turns with facts, {facts} facts held by a candidate line, "
        f"{lines / max(turns, 1):.1f} candidate lines a turn ({missing} without a vector)\n"
        f"  line_similarity  top-1 {share['sim1']:.3f}  top-3 {share['sim3']:.3f}\n"
        f"  hand score       top-1 {share['hand1']:.3f}  top-3 {share['hand3']:.3f}\n"
        f"  either top-3 {share['either3']:.3f} (similarity's top 3 hold "
        f"{counts['sim3_hand_missed']} facts the hand score's top 3 miss)\n"
        f"  line_similarity inside the first page, for the {counts['first']} facts it holds: "
        f"top-1 {counts['first1'] / max(counts['first'], 1):.3f}  "
        f"top-3 {counts['first3'] / max(counts['first'], 1):.3f}"
    )


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--context"]
    for name in args or list(SETS):
        asyncio.run(_measure(name, "--context" in sys.argv))


if __name__ == "__main__":
    main()
