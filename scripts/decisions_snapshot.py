"""Dump every judged turn's decision with the rule rewriter, to check a refactor changes nothing.

For ptes-dev, ptes-aurora and the demo (MTRAG is left out: its corpora take 25-50 minutes
each to embed on a CPU), each turn runs through the evaluation's own path (the corpus
ingested into its evaluation collection, `conversations.quality.evaluate.evaluate_mode` with
the rule rewriter and no model) and the script writes, per turn: the queries, the decision
(small talk, ask back with its options, or answer), the top documents and the extractive
answer's text, as one JSON file.

    .venv/bin/python scripts/decisions_snapshot.py .var/decisions-before.json
    .venv/bin/python scripts/decisions_snapshot.py .var/decisions-after.json
    diff .var/decisions-before.json .var/decisions-after.json
"""

from __future__ import annotations

import asyncio
import json
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
    development_collection_load,
    development_sets,
    tasks_load,
)
from conversations.quality.evaluate import evaluate_mode  # noqa: E402
from retrieval.embeddings import get_embedder  # noqa: E402

SETS = development_sets(ROOT)
TOP = 5


def _turn(row: dict[str, Any], rewrite: dict[str, Any]) -> dict[str, Any]:
    """The parts of an evaluation row that a refactor must not change."""
    if row["small_talk"]:
        decision: dict[str, Any] = {"kind": "small_talk", "small_talk": row["small_talk"]}
    elif row["clarified"]:
        decision = {"kind": "ask_back", **(row["clarification"] or {})}
    else:
        decision = {"kind": "answer"}
    return {
        "id": row["id"],
        "queries": row["queries"],
        "decision": decision,
        "reading": row["decision"],
        "top": row["ranked"][:TOP],
        "passages": row["passages"],
        "answer": row["answer"]["text"],
        # The trace's account of the rewrite: notes, filters, why it asks.
        "notes": rewrite["notes"],
        "countries": rewrite["countries"],
        "areas": rewrite["areas"],
        "clarify_reason": rewrite["clarify_reason"],
        "policy": rewrite["policy"],
    }


async def _run(name: str) -> list[dict[str, Any]]:
    loaded = await asyncio.to_thread(development_collection_load, SETS[name], get_embedder())
    rewrites: list[dict[str, Any]] = []
    report = await evaluate_mode(
        tasks=tasks_load(SETS[name].tasks),
        collection=loaded.collection,
        mode="rules",
        ks=[5, 10],
        language=None,
        model=None,
        answers=True,
        answer_model=None,
        on_plan=lambda plan: rewrites.append(plan.outcome.rewrite.to_dict()),
    )
    return [_turn(row, rewrite) for row, rewrite in zip(report.rows, rewrites, strict=True)]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".var/decisions.json"
    names = sys.argv[2:] or list(SETS)
    snapshot = {name: asyncio.run(_run(name)) for name in names}
    out.write_text(json.dumps(snapshot, ensure_ascii=False, indent=1, sort_keys=True))
    turns = sum(len(v) for v in snapshot.values())
    print(f"wrote {out}: {turns} turns ({', '.join(f'{k} {len(v)}' for k, v in snapshot.items())})")


if __name__ == "__main__":
    main()
