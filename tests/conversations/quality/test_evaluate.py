"""The evaluation's answer (`manage.py evaluate --answers`, `manage.py ask`) is the chat's."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.utils import timezone

from conversations.quality.evaluate import turn_answer
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
