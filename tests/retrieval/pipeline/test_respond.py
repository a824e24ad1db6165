"""The answer step shared by the chat (streamed) and the evaluation (not streamed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import date
from typing import Any

import pytest

from retrieval.pipeline.fusion import Hit, MergedHit
from retrieval.pipeline.llm import ChatMessage, ChatModel, LLMError
from retrieval.pipeline.masking import Masker
from retrieval.pipeline.respond import Answer, OnPiece, answer_turn
from retrieval.pipeline.retrieve import RetrievalOutcome
from retrieval.pipeline.types import RewriteResult, SearchQuery
from tests.fakes import FakeChat

pytestmark = pytest.mark.asyncio

EMAIL = "ana.souza@example.com"
CUT_NOTE = "A resposta do modelo foi interrompida; o texto acima pode estar incompleto."
FAILED_NOTE = "O modelo de linguagem não respondeu; mostrando uma resposta extrativa."


def _outcome(*, passages: bool = True) -> RetrievalOutcome:
    masker = Masker()
    question = masker.mask(f"quantos dias de férias eu tenho? meu email é {EMAIL}")
    hit = Hit(
        chunk_id=1,
        document_id=7,
        external_id="pt/ferias",
        title="Férias",
        heading="Quem tem direito",
        text="Todo empregado tem direito a 30 dias de férias por ano de trabalho.",
        position=0,
        area="",
        vector_rank=1,
        text_rank=1,
        score=0.03,
    )
    query = SearchQuery("dias de férias por ano", "normalize")
    merged = [MergedHit(hit, 0.03)] if passages else []
    return RetrievalOutcome(
        masked_question=question,
        masked_window=[],
        rewrite=RewriteResult(queries=[query], backend="rules"),
        queries=[query],
        merged=merged,
        passages=merged,
        timings_ms={},
        errors=[],
        masker=masker,
    )


class CutOff:
    """A model whose stream sends `text`, then fails."""

    name = "cut-off"

    def __init__(self, text: str) -> None:
        self.text = text

    async def complete_json(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("the answer step never asks for JSON")

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol
    ) -> AsyncIterator[str]:
        yield self.text
        raise LLMError("connection reset")


async def _both(
    outcome: RetrievalOutcome,
    streams: Sequence[Sequence[str] | BaseException] = (),
    cut: str | None = None,
) -> tuple[Answer, list[str], Answer]:
    """The streamed answer, its pieces, and the same answer taken without streaming."""
    pieces: list[str] = []

    async def collect(piece: str) -> None:
        pieces.append(piece)

    def model() -> ChatModel | None:
        if cut is not None:
            return CutOff(cut)
        return FakeChat(streams=list(streams)) if streams else None

    def run(on_piece: OnPiece | None) -> asyncio.Future[Answer]:
        return asyncio.ensure_future(
            answer_turn(
                outcome=outcome,
                language="pt",
                model=model(),
                today=date(2026, 12, 1),
                model_timeout=5,
                on_piece=on_piece,
            )
        )

    streamed = await run(collect)
    return streamed, pieces, await run(None)


async def test_the_model_answer_is_unmasked_piece_by_piece_and_taken_whole_alike() -> None:
    outcome = _outcome()
    placeholder = outcome.masked_question.rsplit(" ", 1)[1]
    streamed, pieces, whole = await _both(
        outcome, [["São 30 dias [1] [9]. Escrevo para ", placeholder[:4], placeholder[4:]]]
    )
    assert streamed == whole == Answer(f"São 30 dias [1]. Escrevo para {EMAIL}", "model")
    assert pieces[-1] == EMAIL  # the split placeholder went out once, whole and unmasked


async def test_a_model_cut_off_keeps_its_text_with_a_note_in_both_paths() -> None:
    # The evaluation used to fall back to the extractive answer here, unlike the chat.
    streamed, pieces, whole = await _both(_outcome(), cut="São 30 dias [1].")
    assert streamed == whole
    assert streamed.text == f"São 30 dias [1].\n\n({CUT_NOTE})"
    assert streamed.kind == "model" and streamed.error.startswith("model failed")
    assert "".join(pieces) == streamed.text


async def test_no_usable_model_output_falls_back_to_the_extractive_answer_saying_why() -> None:
    scripts: list[Sequence[str] | BaseException] = [[], LLMError("down")]
    for script in scripts:
        streamed, pieces, whole = await _both(_outcome(), [script])
        assert streamed == whole and streamed.kind == "extractive"
        assert streamed.text.startswith(FAILED_NOTE + "\n\n")
        assert "30 dias de férias" in streamed.text and streamed.error
        assert "".join(pieces) == streamed.text


async def test_without_a_model_or_passages() -> None:
    streamed, pieces, whole = await _both(_outcome())
    assert streamed == whole and streamed.kind == "extractive" and not streamed.error
    assert len(pieces) > 1 and "".join(pieces) == streamed.text
    streamed, pieces, whole = await _both(_outcome(passages=False), [["never asked"]])
    assert streamed == whole and streamed.kind == "nothing"
    assert pieces == [streamed.text] and "Não encontrei nada" in streamed.text


async def test_a_stop_keeps_what_was_shown() -> None:
    stop = asyncio.Event()
    shown: list[str] = []

    async def stop_after_first(piece: str) -> None:
        shown.append(piece)
        stop.set()

    answer = await answer_turn(
        outcome=_outcome(),
        language="pt",
        model=FakeChat(streams=[["São 30 dias", " por ano [1]."]]),
        today=date(2026, 12, 1),
        model_timeout=5,
        on_piece=stop_after_first,
        stop=stop,
    )
    assert answer == Answer("São 30 dias", "model", stopped=True)
    assert shown == ["São 30 dias"]


def _unrelated(question: str, language: str) -> RetrievalOutcome:
    """Pages found for a question they don't answer: none of its words is on them."""
    hits = [
        Hit(
            chunk_id=n,
            document_id=1 if title == "Férias" else n,  # two sections of one page
            external_id=f"doc-{n}",
            title=title,
            heading="",
            text=text,
            position=0,
            area="",
            vector_rank=n,
            text_rank=None,
            score=0.01,
        )
        for n, (title, text) in enumerate(
            [
                ("Férias", "Todo empregado tem direito a 30 dias de férias por ano de trabalho."),
                ("Vale-refeição", "O vale-refeição é creditado no quinto dia útil do mês."),
                ("Férias", "As férias podem ser divididas em até três períodos."),
                ("Plano de saúde", "O plano cobre o cônjuge e os filhos até 24 anos."),
            ],
            start=1,
        )
    ]
    merged = [MergedHit(h, 0.01) for h in hits]
    query = SearchQuery(question, "normalize")
    return RetrievalOutcome(
        masked_question=question,
        masked_window=[],
        rewrite=RewriteResult(queries=[query], backend="rules"),
        queries=[query],
        merged=merged,
        passages=merged,
        timings_ms={},
        errors=[],
        masker=Masker(),
    )


@pytest.mark.parametrize(
    ("question", "language", "says"),
    [
        (
            "how do I claim a parking ticket from a client visit?",
            "en",
            "The pages I found don't say that. The closest ones:",
        ),
        (
            "¿cómo registro una multa de estacionamiento?",
            "es",
            "Los documentos que encontré no dicen eso. Los más cercanos:",
        ),
    ],
)
async def test_pages_that_say_none_of_the_question_get_a_plain_not_found(
    question: str, language: str, says: str
) -> None:
    answer = await answer_turn(
        outcome=_unrelated(question, language),
        language=language,
        model=None,
        today=date(2026, 12, 1),
        model_timeout=5,
    )
    assert answer.kind == "extractive" and answer.not_found
    assert answer.coverage is not None and answer.coverage < 0.10
    # Said in the turn's language, then the closest pages once each, as numbered sources.
    assert answer.text == f"{says}\n\n- Férias [1]\n- Vale-refeição [2]\n- Plano de saúde [4]"


async def test_a_found_answer_is_not_marked_not_found() -> None:
    answer = await answer_turn(
        outcome=_outcome(), language="pt", model=None, today=date(2026, 12, 1), model_timeout=5
    )
    assert not answer.not_found and answer.lines and answer.coverage
    assert "30 dias de férias" in answer.text


async def test_a_question_in_another_language_than_every_page_is_never_refused() -> None:
    # Its words are not the pages' words: the coverage cannot tell whether they answer.
    outcome = _unrelated("how do I claim a parking ticket from a client visit?", "en")
    pages = [MergedHit(replace(m.hit, language="pt"), m.score) for m in outcome.passages]
    outcome = replace(outcome, passages=pages, merged=pages)
    answer = await answer_turn(
        outcome=outcome, language="en", model=None, today=date(2026, 12, 1), model_timeout=5
    )
    assert answer.coverage is not None and answer.coverage < 0.10
    assert not answer.not_found and answer.lines


REJECTED_NOTE = (
    "A resposta do modelo não citava os documentos, se repetia ou estava em outro idioma; "
    "mostrando uma resposta extrativa."
)


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (["Para ajudá-lo e ajudá-lo ", "não também também ajudá-lo."], "cites no passage"),
        (
            ["Todo empregado tem direito ", "a trinta dias [1] dias [1] dias [1] dias [1]."],
            "repeats",
        ),
        (
            ["Every employee is entitled to thirty days ", "of paid vacation each year [1]."],
            "in en",
        ),
    ],
)
async def test_a_model_answer_that_cannot_stand_is_replaced_with_a_visible_note(
    script: list[str], why: str
) -> None:
    streamed, pieces, whole = await _both(_outcome(), [script])
    assert streamed == whole and streamed.kind == "extractive"
    assert streamed.text.startswith(REJECTED_NOTE + "\n\n")
    assert "30 dias de férias" in streamed.text
    assert why in streamed.error and streamed.error.startswith("the model's answer was replaced")
    # The page showed the model's words while they came; the final text replaces them.
    assert "".join(pieces).startswith("".join(script))
