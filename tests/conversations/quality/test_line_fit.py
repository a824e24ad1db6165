"""The line model's fitting: a conditional logit over each question's candidate lines."""

from __future__ import annotations

import numpy as np

from conversations.quality.line_fit import (
    conditional_logit,
    folds_by_group,
    linear_scores,
    top_hits,
)


def _questions(seed: int, count: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Questions of five candidate lines; the line holding the fact has the highest first
    feature more often than not, the second feature is noise."""
    rng = np.random.default_rng(seed)
    rows, labels, owners = [], [], []
    for q in range(count):
        answer = int(rng.integers(5))
        for i in range(5):
            signal = rng.normal(1.5 if i == answer else 0.0, 1.0)
            rows.append([signal, rng.normal()])
            labels.append(int(i == answer))
            owners.append(q)
    return np.array(rows), np.array(labels), np.array(owners)


def test_the_ranking_loss_weighs_the_feature_that_marks_the_answer() -> None:
    x, y, owners = _questions(1)
    weights, means, scales = conditional_logit(x, y, owners, penalty=0.1)
    assert weights[0] > 0.5
    assert abs(weights[1]) < weights[0] / 3
    # On questions it never saw, the top line holds the fact far above chance (1 in 5).
    tx, ty, towners = _questions(2)
    share, total = top_hits(linear_scores(weights, means, scales, tx), ty, towners, 1)
    assert total == 40 and share > 0.5


def test_a_question_without_a_fact_teaches_nothing() -> None:
    x, y, owners = _questions(3, count=10)
    with_empty = np.vstack([x, [[9.0, 9.0], [8.0, -9.0]]])
    labels = np.concatenate([y, [0, 0]])
    owner = np.concatenate([owners, [99, 99]])
    plain, _, _ = conditional_logit(x, y, owners, penalty=1.0)
    padded, _, _ = conditional_logit(with_empty, labels, owner, penalty=1.0)
    # Only the scaling moved (the extra rows change the means): the direction is the same.
    assert np.sign(plain[0]) == np.sign(padded[0]) == 1


def test_folds_keep_a_conversation_whole() -> None:
    groups = ["a", "a", "b", "c", "c", "c", "d", "e"]
    folds = folds_by_group(groups, 3)
    assert len(folds) == 3
    seen = np.concatenate([test for _, test in folds])
    assert sorted(seen.tolist()) == list(range(len(groups)))
    for train, test in folds:
        assert not {groups[i] for i in train} & {groups[i] for i in test}


def test_top_hits_counts_questions_with_a_fact() -> None:
    scores = np.array([0.9, 0.1, 0.5, 0.7, 0.2, 0.3])
    labels = np.array([0, 1, 1, 0, 0, 0])
    owners = np.array([0, 0, 1, 1, 2, 2])
    assert top_hits(scores, labels, owners, 1) == (0.0, 2)
    assert top_hits(scores, labels, owners, 2) == (1.0, 2)
