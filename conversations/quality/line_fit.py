"""Fitting the extractive answer's line model (numpy and scipy; used by
`scripts/fit_line_choice.py`).

A conditional logit: each question's candidate lines compete, and the loss is minus the log
of the probability the model gives the lines that hold one of the question's judged facts,
plus an L2 penalty. Features are centred and scaled before fitting; the weights apply to the
scaled features (`LineModel` stores the means and scales).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

Array = Any  # numpy arrays (numpy's own typing of shapes adds nothing here)


def conditional_logit(
    x: Array, y: Array, owners: Array, penalty: float
) -> tuple[Array, Array, Array]:
    """Weights on the scaled features, and the features' means and scales.

    `x`: one row of features per candidate line; `y`: 1 where the line holds a fact;
    `owners`: the question each line belongs to. Questions with no such line teach nothing
    and are left out.
    """
    means = x.mean(axis=0)
    scales = x.std(axis=0)
    scales[scales == 0] = 1.0
    scaled = (x - means) / scales
    questions = [
        (scaled[owners == o], y[owners == o] == 1)
        for o in np.unique(owners)
        if y[owners == o].any()
    ]

    def loss(w: Array) -> tuple[float, Array]:
        value, grad = penalty * float(w @ w), 2 * penalty * w
        for features, holds in questions:
            scores = features @ w
            p = np.exp(scores - logsumexp(scores))
            q = np.zeros_like(p)
            q[holds] = np.exp(scores[holds] - logsumexp(scores[holds]))
            value -= float(logsumexp(scores[holds]) - logsumexp(scores))
            grad = grad + features.T @ (p - q)
        return value, grad

    result = minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B")
    return result.x, means, scales


def linear_scores(weights: Array, means: Array, scales: Array, x: Array) -> Array:
    return ((x - means) / scales) @ weights


def folds_by_group(groups: Sequence[str], count: int) -> list[tuple[Array, Array]]:
    """Train/test index pairs with each group (a conversation) wholly in one fold, groups
    dealt to the folds in order of appearance."""
    names = list(dict.fromkeys(groups))
    fold_of = {name: i % count for i, name in enumerate(names)}
    assigned = np.array([fold_of[g] for g in groups])
    return [(np.where(assigned != k)[0], np.where(assigned == k)[0]) for k in range(count)]


def top_hits(scores: Array, labels: Array, owners: Array, top: int) -> tuple[float, int]:
    """Share of the questions (with a fact on some candidate) whose `top` best-scored lines
    hold one, and how many such questions there are."""
    hit = total = 0
    for owner in np.unique(owners):
        mask = owners == owner
        if not labels[mask].any():
            continue
        total += 1
        order = np.argsort(-scores[mask], kind="stable")[:top]
        hit += int(labels[mask][order].any())
    return (hit / total if total else 0.0), total
