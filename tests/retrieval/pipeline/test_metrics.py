from __future__ import annotations

import math

import pytest

from retrieval.pipeline.metrics import (
    mrr_at,
    ndcg_at,
    percentile,
    precision_recall,
    recall_at,
)


def test_recall_counts_documents_within_k() -> None:
    assert recall_at(["a", "b", "c"], {"a", "c", "z"}, 2) == pytest.approx(1 / 3)
    assert recall_at(["a"], set(), 5) == 0.0


def test_mrr_is_first_relevant_rank() -> None:
    assert mrr_at(["x", "y", "a"], {"a"}) == pytest.approx(1 / 3)
    assert mrr_at(["x"] * 10 + ["a"], {"a"}, 10) == 0.0


def test_ndcg_perfect_and_partial() -> None:
    assert ndcg_at(["a", "b"], {"a", "b"}) == pytest.approx(1.0)
    assert ndcg_at(["x", "a"], {"a"}) == pytest.approx(1 / math.log2(3))


def test_percentile_interpolates() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([], 95) == 0.0


def test_precision_recall_of_decisions() -> None:
    assert precision_recall([True, True, False], [True, False, True]) == (0.5, 0.5)
