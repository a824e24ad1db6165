"""A model's answer checked before it is shown as the answer (pure).

A small local model may write an answer that cites no passage, loops over a few words or
switches language ("Para ajudá-lo e ajudá-lo não também também ajudá-lo."): the turn then
shows the extractive answer instead, with a note saying why.
"""

from __future__ import annotations

from collections import Counter

from ..text import detect_language, token_spans
from .grounded import clean_citations

# A run of this many words said this many times is a loop, not an answer.
LOOP_WORDS = 3
LOOP_TIMES = 3
# An answer this long whose distinct words are under this share of its words repeats itself.
SHORT_WORDS = 12
DISTINCT_SHARE = 0.5


def model_answer_problem(text: str, *, passage_count: int, language: str) -> str | None:
    """Why the model's answer cannot stand (cites nothing, repeats itself, is in another
    language than the turn), or None when it can."""
    _cleaned, cited = clean_citations(text, passage_count)
    if not cited:
        return "it cites no passage"
    if _repeats(text):
        return "it repeats itself"
    written = detect_language(text)
    if written is not None and language in {"pt", "es", "en"} and written != language:
        return f"it is written in {written}, the turn in {language}"
    return None


def _repeats(text: str) -> bool:
    words = [t.norm for t in token_spans(text) if not t.norm.isdigit()]
    if any(a == b and len(a) > 2 for a, b in zip(words, words[1:], strict=False)):
        return True  # the same word twice in a row ("também também")
    runs = Counter(tuple(words[i : i + LOOP_WORDS]) for i in range(len(words) - LOOP_WORDS + 1))
    if runs and max(runs.values()) >= LOOP_TIMES:
        return True
    return len(words) >= SHORT_WORDS and len(set(words)) < DISTINCT_SHARE * len(words)
