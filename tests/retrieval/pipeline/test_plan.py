"""The pipeline's one entry point: a turn request in, a plan (small talk, ask back, answer) out.

Pure: `plan_turn` runs on a fake search (`tests.fakes.FakeSearcher`), no database.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from retrieval.pipeline.fusion import Hit
from retrieval.pipeline.plan import TurnBackends, TurnPlan, TurnRequest, plan_turn, turn_language
from retrieval.pipeline.retrieve import RetrievalSettings
from retrieval.pipeline.search import Scope, SearchRequest
from retrieval.pipeline.types import HistoryMessage, LexiconView
from tests.fakes import FakeSearcher

VACATION = Hit(1, 1, "ferias", "Férias", "", "30 dias de férias por ano", 0, "", 1, 1, 0.1)
HEALTH = "Assistência médica — inclusão de dependentes"
DENTAL = "Assistência odontológica — dependentes"


def _request(question: str, history: tuple[HistoryMessage, ...] = ()) -> TurnRequest:
    return TurnRequest(
        question=question,
        history=history,
        scope=Scope(collection_id=1),
        glossary=(),
        settings=RetrievalSettings(mode="rules"),
        language=turn_language(question, history, explicit=None, default="pt"),
        default_language="pt",
    )


def _plan(request: TurnRequest, searcher: FakeSearcher) -> TurnPlan:
    backends = TurnBackends(searcher=searcher, embedder=None, lexicon=lambda w: LexiconView())
    return asyncio.run(plan_turn(request, backends))


def test_small_talk_is_replied_to_without_a_search() -> None:
    searcher = FakeSearcher(lambda request: [VACATION])
    plan = _plan(_request("muito obrigado!"), searcher)
    assert plan.kind == "small_talk" and plan.small_talk == "thanks"
    assert plan.reply and not plan.outcome.queries
    assert searcher.requests == [] and not plan.searched


def test_a_question_is_answered_from_the_passages_its_searches_found() -> None:
    searcher = FakeSearcher(lambda request: [VACATION])
    plan = _plan(_request("quantos dias de férias eu tenho por ano?"), searcher)
    assert plan.kind == "answer" and plan.reply is None and plan.searched
    assert [m.hit.external_id for m in plan.outcome.passages] == ["ferias"]
    assert any("férias" in r.text for r in searcher.requests)


def _plans_found(request: SearchRequest) -> list[Hit]:
    hits = [
        Hit(1, 1, "saude", HEALTH, "", "mensalidade do titular", 0, "", 1, 1, 0.1),
        Hit(2, 2, "odonto", DENTAL, "", "mensalidade por pessoa", 0, "", 2, 2, 0.05),
    ]
    return hits if "odontologica" in request.text else hits[:1]


def test_a_turn_that_only_asks_how_much_after_a_reply_naming_two_pages_is_asked_back() -> None:
    history = (
        HistoryMessage("user", "meu filho nasceu ontem, o que eu preciso fazer?"),
        HistoryMessage(
            "assistant",
            "Inclua-o como dependente na assistência médica e na assistência odontológica.",
        ),
    )
    plan = _plan(_request("quanto custa por mês?", history), FakeSearcher(_plans_found))
    assert plan.kind == "ask_back" and not plan.searched
    assert plan.options == (HEALTH, DENTAL)
    assert plan.reply == plan.outcome.rewrite.clarification.question  # type: ignore[union-attr]


def test_the_request_and_the_plan_are_frozen() -> None:
    request = _request("muito obrigado!")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.question = "outra"  # type: ignore[misc]
    plan = _plan(request, FakeSearcher())
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.kind = "answer"  # type: ignore[misc]


def test_a_turn_too_short_to_tell_its_language_takes_the_earlier_words_language() -> None:
    history = (HistoryMessage("user", "¿cuántos días de vacaciones tengo por año?"),)
    assert turn_language("ok", history, explicit=None, default="pt") == "es"
    assert turn_language("ok", (), explicit=None, default="pt") == "pt"
    assert turn_language("ok", history, explicit="en", default="pt") == "en"
    assert (
        turn_language("quantos dias de férias eu tenho?", history, explicit=None, default="en")
        == "pt"
    )
