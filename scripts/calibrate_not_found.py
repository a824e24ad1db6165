"""Calibrate the extractive answer's "not found" threshold from `evaluate --answers` reports.

Answerable turns: reports of judged sets over their own pages (ptes-dev, the demo).
Unanswerable ones: reports of turns whose pages cannot answer them (a set's questions over
another company's pages, MTRAG-UN's `-unanswerable` turns). Never ptes-aurora: it is the
check set. Prints, per threshold on the answer's coverage, what it refuses, and the threshold
to set as `NOT_FOUND_COVERAGE` (retrieval/pipeline/answer/extractive.py).

    python scripts/calibrate_not_found.py --answerable .var/dev.json .var/demo.json \
        --unanswerable .var/dev-questions-over-demo.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conversations.quality.scoring import not_found_table, not_found_threshold  # noqa: E402

THRESHOLDS = (0.02, 0.05, 0.08, 0.10, 0.12, 0.15, 0.20, 0.25, 0.30)


def answers(paths: list[Path]) -> list[dict[str, Any]]:
    """The extractive answers of these reports' searched turns (those with a coverage)."""
    out = []
    for path in paths:
        report = json.loads(path.read_text(encoding="utf-8"))
        for row in report["tasks"]:
            answer = row.get("answer")
            if answer and answer.get("coverage") is not None:
                out.append(answer)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answerable", type=Path, nargs="+", required=True)
    parser.add_argument("--unanswerable", type=Path, nargs="+", required=True)
    parser.add_argument(
        "--facts-budget",
        type=float,
        default=0.0,
        help="share of the answerable turns' judged facts that refusals may hold (default 0: "
        "refuse no answerable turn)",
    )
    parser.add_argument(
        "--min-precision",
        type=float,
        default=0.0,
        help="share of the refusals that must be of unanswerable turns (issue 35 asks .80)",
    )
    args = parser.parse_args()
    good, bad = answers(args.answerable), answers(args.unanswerable)
    if not good or not bad:
        parser.error("both sides need answers with a coverage (evaluate --answers reports)")
    table = not_found_table(good, bad, THRESHOLDS)
    print(f"answerable {len(good)}, unanswerable {len(bad)}")
    print("threshold  unanswerable refused  answerable refused  facts at risk  precision")
    for row in table:
        precision = "-" if row["precision"] is None else f"{row['precision']:.2f}"
        print(
            f"{row['threshold']:>9.2f}  {row['recall']:>21.3f}  {row['refused_answerable']:>18}"
            f"  {row['facts_at_risk']:>13.3f}  {precision:>9}"
        )
    threshold = not_found_threshold(
        table, facts_budget=args.facts_budget, min_precision=args.min_precision
    )
    print(f"NOT_FOUND_COVERAGE = {threshold:.2f}")


if __name__ == "__main__":
    main()
