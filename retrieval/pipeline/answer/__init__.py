"""Answer building (pure): the grounded prompt, citation clean-up, the extractive answer.

The answer replies to the user's ORIGINAL words; passages are numbered [1]..[n] like the
source cards, and a citation pointing at no passage is dropped.
"""

from __future__ import annotations

from ..types import LineVector
from .extractive import (
    ChosenLine,
    ExtractiveAnswer,
    extractive_answer,
    extractive_choice,
    line_similarity,
    line_texts,
)
from .grounded import (
    LABELS,
    PROMPT_DIR,
    LineVectors,
    Passage,
    answer_language,
    build_answer_messages,
    clean_citations,
    context_chunk_ids,
    context_passages,
    label,
    passages_from_hits,
    query_rankings,
)

__all__ = [
    "ChosenLine",
    "ExtractiveAnswer",
    "extractive_choice",
    "LABELS",
    "PROMPT_DIR",
    "Passage",
    "answer_language",
    "build_answer_messages",
    "clean_citations",
    "LineVector",
    "LineVectors",
    "context_chunk_ids",
    "context_passages",
    "line_similarity",
    "line_texts",
    "extractive_answer",
    "label",
    "passages_from_hits",
    "query_rankings",
]
