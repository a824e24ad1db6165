"""What makes a turn worth a look, decided from its stored trace (pure, no I/O).

The SQL filters in `selectors` encode the same rules; tests hold the two together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A passage is corroborated when one query ranked it in the top STRONG_RANK of BOTH search
# legs: the words and the meaning agree. A turn where no hit is corroborated retrieved only
# what one leg guessed, the usual sign of a vocabulary gap (an unknown acronym, slang).
STRONG_RANK = 3
# jsonpath of a corroborated hit, for jsonb_path_exists (same rule as `is_corroborated`).
STRONG_PATH = (
    f"$.hits[*].found_by[*] ? (@.vector_rank <= {STRONG_RANK} && @.text_rank <= {STRONG_RANK})"
)


def is_corroborated(search: Mapping[str, Any]) -> bool:
    """Tell whether some hit was ranked high by both the vector and the full-text leg."""
    for hit in search.get("hits") or []:
        for found in hit.get("found_by") or []:
            vector, text = found.get("vector_rank"), found.get("text_rank")
            if vector is not None and text is not None and max(vector, text) <= STRONG_RANK:
                return True
    return False


def is_weak(*, search: Mapping[str, Any], clarified: bool, no_results: bool) -> bool:
    """Results came back, but none is backed by both search legs."""
    if clarified or no_results or not search.get("hits"):
        return False
    return not is_corroborated(search)


def turn_flags(
    *,
    no_results: bool,
    clarified: bool,
    anomaly: bool,
    search: Mapping[str, Any],
    errors: bool,
    total_ms: float | None,
    slow_ms: float,
    thumbs_down: bool,
    thumbs_up: bool,
) -> list[str]:
    """The flags of one turn, in the order pages show them (`selectors.trace_flag_q` in SQL)."""
    flags = []
    if no_results:
        flags.append("no_results")
    if is_weak(search=search, clarified=clarified, no_results=no_results):
        flags.append("weak")
    if clarified:
        flags.append("clarified")
    if anomaly:
        flags.append("anomaly")
    if errors:
        flags.append("errors")
    if total_ms is not None and total_ms > slow_ms:
        flags.append("slow")
    if thumbs_down:
        flags.append("thumbs_down")
    if thumbs_up:
        flags.append("thumbs_up")
    return flags


def total_ms(timings: Mapping[str, Any]) -> float | None:
    """Milliseconds from the message's arrival to the end of its answer, when known."""
    value = timings.get("to_done")
    return float(value) if isinstance(value, int | float) else None
