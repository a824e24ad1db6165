"""The evaluation's answer (`manage.py evaluate --answers`, `manage.py ask`) is the chat's."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.utils import timezone

from conversations.quality.datasets import EvalTask
from conversations.quality.evaluate import answer_row, turn_answer
from retrieval.pipeline.llm import ChatModel, LLMError
from retrieval.pipeline.respond import answer_turn
from tests.fakes import FakeChat
from tests.retrieval.pipeline.test_respond import CutOff, _outcome

pytestmark = pytest.mark.asyncio


async def _chat_says(model: ChatModel) -> str:
    pieces: list[str] = []

    async def show(piece: str) -> None:
        pieces.append(piece)

    answer = await answer_turn(
        outcome=_outcome(),
        language="pt",
        model=model,
        today=timezone.localdate(),
        model_timeout=5,
        on_piece=show,
    )
    assert "".join(pieces) == answer.text
    return answer.text


@pytest.mark.parametrize("kind", ["cut off", "empty", "failed"])
async def test_a_failing_model_is_scored_on_what_the_chat_shows(kind: str) -> None:
    def model() -> ChatModel:
        if kind == "cut off":
            return CutOff("São 30 dias [1].")
        script: Sequence[str] | BaseException = [] if kind == "empty" else LLMError("down")
        return FakeChat(streams=[script])

    text, extractive = await turn_answer(outcome=_outcome(), language="pt", model=model())
    assert text == await _chat_says(model())
    assert extractive == (kind != "cut off")


async def _scored(*, passages: bool, expect_no_answer: bool = False) -> dict[str, object]:
    task = EvalTask(
        "t-1",
        (),
        "quantos dias de férias eu tenho?",
        frozenset({"pt/ferias"}),
        expected_answer_contains=("30 dias", "por ano de trabalho"),
        expect_no_answer=expect_no_answer,
    )
    outcome = _outcome(passages=passages)
    row = {
        "clarified": False,
        "clarification": None,
        "searched": True,
        "passages": [m.hit.external_id for m in outcome.passages],
    }
    return await answer_row(
        task=task, outcome=outcome, row=row, language="pt", model=None, reference=None
    )


async def test_an_answer_row_keeps_its_text_facts_by_length_and_the_pages_ceiling() -> None:
    row = await _scored(passages=True)
    assert isinstance(row["text"], str) and "30 dias" in row["text"]
    assert row["not_found"] is False
    assert row["facts"] == {"30 dias": True, "por ano de trabalho": True}
    assert row["facts_at"] == {
        str(n): {"30 dias": True, "por ano de trabalho": True} for n in (40, 80, 120)
    }
    assert row["ceiling"] == {k: {"30 dias": True, "por ano de trabalho": True} for k in ("1", "3")}


async def test_an_answer_that_found_nothing_is_marked_not_found() -> None:
    row = await _scored(passages=False, expect_no_answer=True)
    assert row["not_found"] is True and row["expect_no_answer"] is True
    assert row["ceiling"] == {k: {"30 dias": False, "por ano de trabalho": False} for k in "13"}
