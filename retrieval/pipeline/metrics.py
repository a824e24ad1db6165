"""Retrieval metrics at document level (pure)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence


def recall_at(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of the relevant documents found in the first k (0 when nothing is relevant)."""
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def mrr_at(ranked: Sequence[str], relevant: Collection[str], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document within the first k."""
    for index, doc in enumerate(ranked[:k], start=1):
        if doc in relevant:
            return 1.0 / index
    return 0.0


def ndcg_at(ranked: Sequence[str], relevant: Collection[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 1) for i, d in enumerate(ranked[:k], start=1) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(relevant), k) + 1))
    return dcg / ideal if ideal else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def precision_recall(predicted: Sequence[bool], expected: Sequence[bool]) -> tuple[float, float]:
    """Precision and recall of a boolean decision (e.g. 'asked for clarification')."""
    tp = sum(1 for p, e in zip(predicted, expected, strict=True) if p and e)
    fp = sum(1 for p, e in zip(predicted, expected, strict=True) if p and not e)
    fn = sum(1 for p, e in zip(predicted, expected, strict=True) if e and not p)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall
