"""The extractive answer (pure): sentences of the passages, chosen for the question."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..text import content_terms, normalize
from ..types import RewriteResult
from .grounded import Passage, label

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-ZÀ-ÖØ-Þ0-9¿¡\"“(])")


def _sentences(text: str) -> list[str]:
    flat = re.sub(r"\s*\n\s*[-*•]\s*", ". ", text)
    flat = re.sub(r"\s+", " ", flat).strip()
    return [s.strip() for s in _SENTENCE.split(flat) if len(s.strip()) > 20]


def extractive_answer(
    *,
    question: str,
    queries: Sequence[str],
    passages: Sequence[Passage],
    language: str,
    rewrite: RewriteResult | None = None,
) -> str:
    """Pick the sentences of the top passages that share most words with the question.

    Used without a model server: it never invents anything, and says so.
    """
    if not passages:
        return label("nothing", language)
    terms = set(content_terms(question))
    for query in queries:
        terms.update(content_terms(query))
    scored: list[tuple[float, int, int, str]] = []
    for rank, passage in enumerate(passages[:4]):
        for order, sentence in enumerate(_sentences(passage.text)):
            words = set(normalize(w) for w in re.findall(r"\w+", sentence))
            overlap = len(terms & words)
            if overlap == 0:
                continue
            # Earlier passages rank higher; long sentences are not favoured just for length.
            score = overlap / (1 + 0.15 * rank) - 0.002 * max(0, len(sentence) - 250)
            scored.append((score, passage.number, order, sentence))
    if not scored:
        best = passages[0]
        first = _sentences(best.text)[:2] or [best.text[:300]]
        scored = [(1.0, best.number, i, s) for i, s in enumerate(first)]
    chosen: list[tuple[float, int, int, str]] = []
    per_passage: dict[int, int] = {}
    for item in sorted(scored, key=lambda s: -s[0]):
        if per_passage.get(item[1], 0) >= 2:
            continue
        per_passage[item[1]] = per_passage.get(item[1], 0) + 1
        chosen.append(item)
        if len(chosen) >= 4:
            break
    chosen.sort(key=lambda s: (s[1], s[2]))
    lines = [f"- {sentence} [{number}]" for _, number, _, sentence in chosen]
    return label("extractive", language) + "\n\n" + "\n".join(lines)
