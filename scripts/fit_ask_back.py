"""Refit the thresholds of asking back on sibling pages on ptes-dev and the demo.

The decision's features are the pages found and the question's own words
(`retrieval.pipeline.ask_back`); its thresholds live in `retrieval/pipeline/tuning.py`:
how many own words a question may have and still be too vague (`short_question_terms`), how
many of the best pages may compete (`clarify_depth`) and how many titles are read
(`titles_read`). This script runs every judged turn of ptes-dev and the demo (the evaluation's
own path, rules, no model) under each value of a small grid and prints, per value, the
clarification precision and recall pooled over both sets and the retrieval R@5 / MRR@10,
then the value chosen: the best F1 whose precision is not below the product's, ties to the
product's value (never ptes-aurora: it is the check set).

    .venv/bin/python scripts/fit_ask_back.py
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")

import django  # noqa: E402

django.setup()

from conversations.quality.datasets import (  # noqa: E402
    development_collection_load,
    development_sets,
    tasks_load,
)
from conversations.quality.evaluate import evaluate_mode  # noqa: E402
from conversations.quality.scoring import clarification_scores  # noqa: E402
from retrieval.embeddings import get_embedder  # noqa: E402
from retrieval.pipeline.tuning import DEFAULT_TUNING, Tuning  # noqa: E402

SETS = development_sets(ROOT)
GRID = {
    "short_question_terms": (3, 4, 5),
    "clarify_depth": (3, 4),
    "titles_read": (4, 6),
}


async def _rows(name: str, collection: Any, tuning: Tuning) -> list[dict[str, Any]]:
    report = await evaluate_mode(
        tasks=tasks_load(SETS[name].tasks),
        collection=collection,
        mode="rules",
        ks=[5, 10],
        language=None,
        model=None,
        tuning=tuning,
    )
    return report.rows


async def _collections() -> dict[str, Any]:
    out = {}
    for name, dev in SETS.items():
        loaded = await asyncio.to_thread(development_collection_load, dev, get_embedder())
        out[name] = loaded.collection
    return out


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    scored = [r[key] for r in rows if r.get(key) is not None and r["relevant"]]
    return sum(scored) / len(scored) if scored else 0.0


def _f1(p: float | None, r: float | None) -> float:
    return 2 * p * r / (p + r) if p and r else 0.0


async def _fit() -> None:
    collections = await _collections()  # one event loop: its threads keep one connection each
    results = []
    for values in itertools.product(*GRID.values()):
        change = dict(zip(GRID, values, strict=True))
        tuning = replace(DEFAULT_TUNING, **change)
        rows = [row for name in SETS for row in await _rows(name, collections[name], tuning)]
        clar = clarification_scores(rows)
        results.append((change, clar, _mean(rows, "recall@5"), _mean(rows, "mrr@10")))
        print(
            f"{change}  P {clar['precision']:.2f} R {clar['recall']:.2f} "
            f"(asked {clar['asked']}, expected {clar['expected']})  "
            f"R@5 {results[-1][2]:.3f} MRR@10 {results[-1][3]:.3f}",
            flush=True,
        )
    product = {key: getattr(DEFAULT_TUNING, key) for key in GRID}
    floor = next(c["precision"] for change, c, _, _ in results if change == product)
    eligible = [r for r in results if (r[1]["precision"] or 0) >= (floor or 0)]
    best = max(
        eligible,
        key=lambda r: (_f1(r[1]["precision"], r[1]["recall"]), r[2], r[0] == product),
    )
    print(f"chosen: {best[0]} (product: {product})")


def main() -> None:
    asyncio.run(_fit())


if __name__ == "__main__":
    main()
