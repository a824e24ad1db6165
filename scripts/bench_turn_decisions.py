"""What the turn decisions without a model cost: the rule rewrite, and the extra searches.

On the judged PT/ES turns of ../shared/data/ptes-dev (loaded into their own evaluation
collection, as `manage.py evaluate` does), each turn is run through the real retrieval
(`retrieval.pipeline.retrieve.retrieve`, rules mode) and, in the same run, through a
single-query baseline: the turn's first query alone, embedded and searched the same way.
Printed: the rewrite's p50/p95, embed + search p50/p95 of both, and their difference. The
rewrite is also given for the untimed first pass alone: each turn seen once, in conversation
order, as a chat sees them (its history's words already looked up, its own new); the timed
passes repeat turns whose words the vocabulary statistics already keep.

    .venv/bin/python scripts/bench_turn_decisions.py [--tasks N] [--repeat R] [--json out.json]
        [--data ../shared/data/ptes-dev]

`make bench` passes `--json`; scripts/bench_app.py reads it (`--decisions-json`) into its table
of targets (the turn-decisions issue: rewrite p95 <= 20 ms, the extra search <= 15 ms p50).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
os.environ.setdefault("CHATRAG_DEBUG", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import django  # noqa: E402

django.setup()

from conversations.quality.datasets import (  # noqa: E402
    evaluation_collection_load,
    glossary_load,
    tasks_load,
)
from retrieval.embeddings import get_embedder  # noqa: E402
from retrieval.pipeline.metrics import percentile  # noqa: E402
from retrieval.pipeline.plan import plan_turn  # noqa: E402
from retrieval.pipeline.search import Scope, SearchRequest  # noqa: E402
from retrieval.services import (  # noqa: E402
    query_embedder_for,
    retrieval_settings,
    search_engine,
    turn_backends_for,
    turn_request_for,
)

DATA = ROOT.parent / "shared" / "data" / "ptes-dev"


def summary(
    rewrite_ms: list[float],
    turn_ms: list[float],
    single_ms: list[float],
    searches: list[int],
    first_ms: list[float] | None = None,
) -> dict[str, object]:
    """The figures printed, as the JSON that scripts/bench_app.py reads."""

    def stats(values: list[float]) -> dict[str, float]:
        return {
            "n": len(values),
            "p50_ms": percentile(values, 50),
            "p95_ms": percentile(values, 95),
        }

    extra = [t - s for t, s in zip(turn_ms, single_ms, strict=True)]
    return {
        "rewrite": stats(rewrite_ms),
        "rewrite_first_pass": stats(first_ms or []),
        "turn": stats(turn_ms),
        "single": stats(single_ms),
        "extra": stats(extra),
        "searches_mean": sum(searches) / len(searches) if searches else 0.0,
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=0, help="only the first N tasks")
    parser.add_argument("--repeat", type=int, default=2, help="timed passes over the tasks")
    parser.add_argument("--json", type=Path, help="write the figures here (for bench_app.py)")
    parser.add_argument("--data", type=Path, default=DATA, help="the judged set's folder")
    args = parser.parse_args()
    data: Path = args.data
    if not (data / "tasks.jsonl").exists():
        print(f"skipped: no judged turns at {data}")
        return

    embedder = get_embedder()
    loaded = evaluation_collection_load(
        corpus=data / "corpus.jsonl",
        embedder=embedder,
        glossary=glossary_load(data / "glossary.json"),
    )
    collection = loaded.collection
    tasks = tasks_load(data / "tasks.jsonl")
    if args.tasks:
        tasks = tasks[: args.tasks]
    engine = search_engine()
    scope = Scope(collection_id=collection.id, see_everything=True)
    settings = retrieval_settings(mode="rules")
    backends = turn_backends_for(collection=collection, scope=scope, model=None, cached=False)
    requests = [
        turn_request_for(
            question=task.question,
            history=task.history,
            collection=collection,
            scope=scope,
            language=task.language,
            settings=settings,
        )
        for task in tasks
    ]
    query_embedder = query_embedder_for(collection=collection)
    assert query_embedder is not None

    rewrite_ms: list[float] = []
    turn_ms: list[float] = []
    single_ms: list[float] = []
    searches: list[int] = []
    first_ms: list[float] = []

    async def one(task_index: int, timed: bool) -> None:
        task = tasks[task_index]
        outcome = (await plan_turn(requests[task_index], backends)).outcome
        if not outcome.queries:
            return  # small talk: nothing searched
        if not timed and task_index:  # the very first turn loads the dictionaries
            first_ms.append(outcome.timings_ms["rewrite"])
        first = outcome.rewrite.queries[0].text if outcome.rewrite.queries else task.question
        start = time.perf_counter()
        vector = query_embedder.embed_queries([first])[0]
        engine.search_many([SearchRequest(text=first, vector=vector)], scope, settings.search)
        single = (time.perf_counter() - start) * 1000
        if timed:
            rewrite_ms.append(outcome.timings_ms["rewrite"])
            turn_ms.append(outcome.timings_ms["embed"] + outcome.timings_ms["search"])
            single_ms.append(single)
            searches.append(len(outcome.queries) + (1 if outcome.rewrite.topic else 0))

    async def run() -> None:
        for index in range(len(tasks)):  # warm: the dictionaries load, the caches fill
            await one(index, timed=False)
        for _ in range(args.repeat):
            for index in range(len(tasks)):
                await one(index, timed=True)

    asyncio.run(run())

    figures = summary(rewrite_ms, turn_ms, single_ms, searches, first_ms=first_ms)
    print(f"turns timed: {len(turn_ms)} ({len(tasks)} x {args.repeat}), {os.cpu_count()} cores")
    rows = [
        ("rule rewrite", "rewrite"),
        ("rule rewrite, 1st pass", "rewrite_first_pass"),
        ("embed+search, turn", "turn"),
        ("embed+search, 1 query", "single"),
        ("extra for the decisions", "extra"),
    ]
    for name, key in rows:
        s = figures[key]
        assert isinstance(s, dict)
        print(f"{name:<24} p50 {s['p50_ms']:6.1f} ms   p95 {s['p95_ms']:6.1f} ms")
    print(f"{'searches per turn':<24} mean {figures['searches_mean']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
