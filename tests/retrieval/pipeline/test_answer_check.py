"""A model's answer that cites nothing, loops or changes language is not shown as the answer."""

from __future__ import annotations

import pytest

from retrieval.pipeline.answer.check import model_answer_problem


@pytest.mark.parametrize(
    ("text", "language", "problem"),
    [
        ("Todo empregado tem 30 dias de férias por ano.", "pt", "it cites no passage"),
        ("São 30 dias [7].", "pt", "it cites no passage"),  # a card that does not exist
        ("Para ajudá-lo e ajudá-lo não também também ajudá-lo [1].", "pt", "it repeats itself"),
        (
            "O prazo é o prazo do prazo é o prazo do prazo é o prazo do mês [1].",
            "pt",
            "it repeats itself",
        ),
        (
            "Every employee is entitled to thirty days of paid vacation each year [1].",
            "pt",
            "it is written in en, the turn in pt",
        ),
    ],
)
def test_a_model_answer_that_cannot_stand_says_why(text: str, language: str, problem: str) -> None:
    assert model_answer_problem(text, passage_count=2, language=language) == problem


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Todo empregado tem direito a 30 dias de férias por ano de trabalho [1].", "pt"),
        ("Las vacaciones son de 20 días hábiles por año [2], pagadas antes de salir.", "es"),
        ("São 30 dias [1].", "pt"),  # too short to tell a language: kept
        ("The notice period is 30 days [1]; the 30 days count from the request [2].", "en"),
    ],
)
def test_a_cited_answer_in_the_turns_language_stands(text: str, language: str) -> None:
    assert model_answer_problem(text, passage_count=2, language=language) is None
