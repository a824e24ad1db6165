"""Asking back when the best pages are siblings (issue 36, item 3), on the real search.

Conversations of our own over a slice of the demo knowledge base, each turn planned by
`plan_turn` as the chat plans it: a short first question whose best pages differ by one
qualifier, and a follow-up about "the plan" after the person named two plans. Beside each,
the turns that must not be asked back: the question names its page, or the conversation
named one plan only, or the turn's own words say which.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from retrieval.pipeline.plan import TurnPlan, plan_turn
from retrieval.pipeline.search import Scope
from retrieval.pipeline.types import HistoryMessage
from tests.conftest import DEMO_KB

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = [
    "pt/plano-de-saude",
    "pt/plano-odontologico",
    "pt/plano-de-saude-prestadores-pj",
    "pt/auxilio-educacao",
    "pt/auxilio-home-office",
    "pt/reembolso-de-despesas",
    "pt/reembolso-de-despesas-prestadores-pj",
    "pt/ferias-regras-gerais",
    "pt/ferias-coletivas",
    "pt/vale-transporte",
    "pt/licenca-paternidade",
]
DENTAL = "Plano odontológico"
HEALTH = "Plano de saúde – titulares, dependentes e coparticipação"
# The person asked about one plan, then the other.
BOTH_PLANS = [
    ("user", "o plano de saúde tem coparticipação?"),
    ("assistant", "Sim, o plano de saúde tem coparticipação em consultas e exames."),
    ("user", "e o plano odontológico, cobre o quê?"),
    ("assistant", "O plano odontológico cobre limpeza, restauração e canal."),
]


@pytest.fixture
def kb(personas: dict[str, Any]) -> Any:
    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.services import documents_ingest, source_from_file
    from retrieval.services import default_collection

    collection = default_collection()
    items = [source_from_file(DEMO_KB / f"{name}.md", root=DEMO_KB) for name in PAGES]
    report = documents_ingest(
        collection=collection, sources=items, embedder=get_embedder(), total=len(items)
    )
    assert not report.errors, report.errors
    return collection


def _plan(kb: Any, question: str, history: list[tuple[str, str]] | None = None) -> TurnPlan:
    from retrieval.services import retrieval_settings, turn_backends_for, turn_request_for

    scope = Scope(collection_id=kb.id, see_everything=True)
    request = turn_request_for(
        question=question,
        history=[HistoryMessage(role, text) for role, text in history or []],  # type: ignore[arg-type]
        collection=kb,
        scope=scope,
        language="pt",
        settings=retrieval_settings(mode="rules", hyde=False, rerank=False),
    )
    backends = turn_backends_for(collection=kb, scope=scope, model=None, cached=False)
    return asyncio.run(plan_turn(request, backends))


def _rules(plan: TurnPlan) -> list[str]:
    return [rule.id for rule in plan.outcome.rewrite.fired]


@pytest.mark.parametrize(
    ("question", "siblings"),
    [
        ("quanto é o auxílio?", {"Auxílio educação", "Auxílio home office"}),
        ("como funciona o reembolso?", {"empregados", "prestadores"}),
    ],
)
def test_a_short_first_question_whose_best_pages_are_siblings_is_asked_back(
    kb: Any, question: str, siblings: set[str]
) -> None:
    plan = _plan(kb, question)
    assert plan.kind == "ask_back", _rules(plan)
    assert all(any(word in option for option in plan.options) for word in siblings)
    assert "ask_siblings" in _rules(plan)


@pytest.mark.parametrize(
    "question",
    [
        "quanto é o auxílio educação?",  # the qualifier is in the question
        "quantos dias de férias eu tenho?",  # the best page is the general rule
    ],
)
def test_a_first_question_that_names_its_page_is_answered(kb: Any, question: str) -> None:
    plan = _plan(kb, question)
    assert plan.kind == "answer", plan.options


@pytest.mark.parametrize(
    "question",
    [
        "quanto custa incluir meu filho no plano?",
        "e pra incluir minha esposa no plano, quanto fica?",
    ],
)
def test_the_plan_for_a_dependant_after_two_plans_were_named_is_asked_back(
    kb: Any, question: str
) -> None:
    plan = _plan(kb, question, BOTH_PLANS)
    assert plan.kind == "ask_back", _rules(plan)
    assert set(plan.options) == {DENTAL, HEALTH}
    assert "ask_siblings" in _rules(plan)


def test_the_plan_after_one_plan_was_named_is_that_plan(kb: Any) -> None:
    plan = _plan(kb, "quanto custa incluir meu filho no plano?", BOTH_PLANS[:2])
    assert plan.kind == "answer", plan.options
    assert plan.outcome.passages[0].hit.title == HEALTH


@pytest.mark.parametrize(
    "question",
    [
        "o plano cobre aparelho ortodôntico?",  # only the dental page says so
        "como funciona o vale-transporte?",  # a new topic
    ],
)
def test_a_turn_whose_words_tell_the_named_plans_apart_is_answered(kb: Any, question: str) -> None:
    plan = _plan(kb, question, BOTH_PLANS)
    assert plan.kind == "answer", plan.options
