"""Time the extractive answer on realistic inputs: p50/p95 ms per answer (no database).

Each ptes-dev task gets its relevant documents plus the next documents of the corpus as six
passages, as a turn would. A message with two or more questions ("...? ...?") is also timed
as the rules rewrite splits it, one part per question (each part scored on its own).
Usage: .venv/bin/python scripts/bench_answer.py [data folder]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from retrieval.pipeline.answer import Passage, extractive_answer  # noqa: E402
from retrieval.pipeline.metrics import percentile  # noqa: E402
from retrieval.pipeline.types import RewriteResult, SearchQuery  # noqa: E402


def _report(label: str, calls: Sequence[Callable[[], object]]) -> None:
    """Time each call (three rounds) and print the spread."""
    times = []
    for call in [*calls] * 3:
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    if not times:
        return
    print(
        f"{label}: {len(times)} answers, p50 {percentile(times, 50):.2f} ms, "
        f"p95 {percentile(times, 95):.2f} ms, max {max(times):.2f} ms"
    )


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/ptes-dev")
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8")]
    by_id = {doc["id"]: i for i, doc in enumerate(corpus)}
    tasks = [json.loads(line) for line in (folder / "tasks.jsonl").open(encoding="utf-8")]
    cases = []
    for task in tasks:
        if not task["relevant"]:
            continue
        picked = [by_id[d] for d in task["relevant"]]
        while len(picked) < 6:
            picked.append((picked[-1] + 1) % len(corpus))
        passages = [
            Passage(n, corpus[i]["title"], "", corpus[i]["text"], corpus[i]["id"])
            for n, i in enumerate(picked, start=1)
        ]
        cases.append((task["question"], task.get("lang", "pt"), passages))
    for question, lang, passages in cases:  # warm up, as a running server is
        extractive_answer(question=question, queries=[], passages=passages, language=lang)
    one = [
        partial(extractive_answer, question=q, queries=[q], passages=passages, language=lang)
        for q, lang, passages in cases
    ]
    _report("extractive answer", one)
    split = []
    for question, lang, passages in cases:
        parts = [p.strip() + "?" for p in question.split("?") if len(p.split()) >= 2]
        if len(parts) >= 2:
            rewrite = RewriteResult([SearchQuery(p, "decompose") for p in parts], backend="rules")
            split.append(
                partial(
                    extractive_answer,
                    question=question,
                    queries=[],
                    passages=passages,
                    language=lang,
                    rewrite=rewrite,
                )
            )
    _report("split messages", split)


if __name__ == "__main__":
    main()
