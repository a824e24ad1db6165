"""The spelling fix's distance: optimal string alignment (rapidfuzz), a swap counting once."""

from __future__ import annotations

import pytest

from retrieval.pipeline.rewrite_rules.lexicon import edit_distance


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("ferias", "ferias", 0),
        ("freias", "ferias", 1),  # two neighbours swapped: one edit
        ("feria", "ferias", 1),
        ("férias", "ferias", 1),  # an accent is a letter of its own
        ("", "abc", 3),
        # Optimal string alignment edits no substring twice: "ca" -> "abc" is 3, where the
        # unrestricted Damerau-Levenshtein distance would say 2.
        ("ca", "abc", 3),
    ],
)
def test_edit_distance_is_the_optimal_string_alignment(a: str, b: str, distance: int) -> None:
    assert edit_distance(a, b) == distance
    assert edit_distance(b, a) == distance
