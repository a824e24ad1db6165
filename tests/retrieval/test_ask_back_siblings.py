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

# A small English knowledge base of our own: siblings that differ by audience, by
# destination, by what is paid for.
ENGLISH_PAGES = {
    "annual-leave": (
        "Annual leave — general rules",
        "hr",
        "Employees are entitled to 25 working days of annual leave a year, accrued monthly. "
        "Leave is requested in the HR portal at least two weeks in advance. Up to five unused "
        "days may be carried over to the next year.",
    ),
    "dental-plan": (
        "Dental plan — employees and dependants",
        "benefits",
        "The dental plan covers cleanings, fillings and root canals. The employee's own cover "
        "is free; adding a spouse or a child costs 12 euros a month per dependant, deducted "
        "from the salary. Orthodontic braces are covered for children under 18.",
    ),
    "health-plan": (
        "Health plan — employees and dependants",
        "benefits",
        "The health plan covers employees from their first day. Adding a spouse or a child "
        "costs 45 euros a month per dependant, deducted from the salary. Consultations have a "
        "co-payment of 10 euros; hospital stays are fully covered.",
    ),
    "meal-allowance": (
        "Meal allowance",
        "benefits",
        "Every employee receives a meal allowance of 9 euros for each working day, loaded on "
        "the meal card on the first business day of the month. Days of leave and sick days are "
        "not counted. Interns receive the same meal allowance.",
    ),
    "notice-contractors": (
        "Notice period — contractors",
        "hr",
        "Contractors end their service agreement with fifteen days of written notice, unless "
        "the agreement sets a longer period. The company gives contractors the same fifteen "
        "days. No notice pay is due to contractors; invoices for the days worked are paid as "
        "usual.",
    ),
    "notice-employees": (
        "Notice period — employees",
        "hr",
        "An employee who resigns must give one month of notice, or two months after five years "
        "of service. The company may waive the notice period at the employee's request. When "
        "the company ends the contract it gives the notice the law requires or pays it instead. "
        "During the notice period the employee keeps every benefit.",
    ),
    "per-diem-domestic": (
        "Per diem — domestic travel",
        "travel",
        "Employees travelling within the country on company business receive a per diem of 60 "
        "euros for each day away with an overnight stay and 30 euros for a day trip without an "
        "overnight stay. The per diem covers meals and local transport; hotels are booked by "
        "the travel desk and paid by the company. The per diem is paid with the next payroll "
        "after the expense report is approved by the manager. Receipts are not required for the "
        "per diem itself, only for expenses claimed on top of it.",
    ),
    "per-diem-international": (
        "Per diem — international travel",
        "travel",
        "Employees travelling abroad on company business receive a per diem that depends on the "
        "destination country: 90 euros a day for Europe and North America, 70 euros for Latin "
        "America and 80 euros elsewhere. Half of the per diem may be paid in advance before "
        "departure on request. The per diem covers meals and local transport abroad. Travel "
        "insurance and visa fees are paid by the company.",
    ),
    "remote-allowance": (
        "Remote work allowance",
        "benefits",
        "Employees who work from home at least three days a week receive a remote work "
        "allowance of 40 euros a month for electricity and internet. The allowance is paid with "
        "the salary and requires a remote work agreement signed with the manager.",
    ),
    "travel-booking": (
        "Travel booking and approval",
        "travel",
        "Business trips are requested in the travel portal at least ten days before departure "
        "and approved by the line manager. Flights and hotels are booked by the travel desk. "
        "Changes and cancellations go through the travel desk as well; fees caused by personal "
        "changes are paid by the employee.",
    ),
}


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


def _plan(
    kb: Any, question: str, history: list[tuple[str, str]] | None = None, language: str = "pt"
) -> TurnPlan:
    from retrieval.services import retrieval_settings, turn_backends_for, turn_request_for

    scope = Scope(collection_id=kb.id, see_everything=True)
    request = turn_request_for(
        question=question,
        history=[HistoryMessage(role, text) for role, text in history or []],  # type: ignore[arg-type]
        collection=kb,
        scope=scope,
        language=language,
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


@pytest.fixture
def english_kb(personas: dict[str, Any], tmp_path: Any) -> Any:
    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.services import documents_ingest, source_from_file
    from retrieval.services import default_collection

    folder = tmp_path / "en"
    folder.mkdir()
    for name, (title, area, text) in ENGLISH_PAGES.items():
        page = f"---\ntitle: {title}\narea: {area}\nlang: en\ngroups:\n---\n# {title}\n\n{text}\n"
        (folder / f"{name}.md").write_text(page, encoding="utf-8")
    items = [source_from_file(path, root=tmp_path) for path in sorted(folder.glob("*.md"))]
    report = documents_ingest(
        collection=default_collection(), sources=items, embedder=get_embedder(), total=len(items)
    )
    assert not report.errors, report.errors
    return default_collection()


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        (
            "how much is the per diem?",
            {"Per diem — domestic travel", "Per diem — international travel"},
        ),
        ("what's the notice period?", {"Notice period — employees", "Notice period — contractors"}),
        ("how much is the allowance?", {"Meal allowance", "Remote work allowance"}),
        ("how much is the per diem abroad?", set()),
        ("what's the notice period for contractors?", set()),
        ("how many days of annual leave do I get?", set()),
    ],
)
def test_english_first_questions_are_asked_back_only_when_siblings_split_them(
    english_kb: Any, question: str, asked: set[str]
) -> None:
    plan = _plan(english_kb, question, language="en")
    assert set(plan.options) == asked, _rules(plan)
    assert plan.kind == ("ask_back" if asked else "answer")


@pytest.mark.parametrize("choice", [DENTAL, HEALTH])
def test_the_option_chosen_then_finds_its_plan_for_the_dependant(kb: Any, choice: str) -> None:
    asked = _plan(kb, "quanto custa incluir meu filho no plano?", BOTH_PLANS)
    history = [*BOTH_PLANS, ("user", "quanto custa incluir meu filho no plano?")]
    assert asked.kind == "ask_back" and asked.reply is not None
    plan = _plan(kb, choice, [*history, ("assistant", asked.reply)])
    assert plan.kind == "answer"
    assert "chosen_option" in _rules(plan)
    assert "filho" in plan.outcome.queries[0].text
    assert plan.outcome.passages[0].hit.title == choice


ENGLISH_PLANS = [
    ("user", "does the health plan have a co-payment?"),
    ("assistant", "Yes: consultations on the health plan have a co-payment of 10 euros."),
    ("user", "and what does the dental plan cover?"),
    ("assistant", "The dental plan covers cleanings, fillings and root canals."),
]


def test_an_english_question_about_the_plan_after_both_plans_is_asked_back(
    english_kb: Any,
) -> None:
    # "does it cost to add ..." reads as pointing back; it still names the plans' shared
    # head word and opens with no continuation, so either plan may be meant.
    question = "how much does it cost to add my son to the plan?"
    plan = _plan(english_kb, question, ENGLISH_PLANS, language="en")
    assert plan.kind == "ask_back", _rules(plan)
    assert {o.split(" — ")[0] for o in plan.options} == {"Health plan", "Dental plan"}
    one = _plan(english_kb, question, ENGLISH_PLANS[:2], language="en")
    assert one.kind == "answer", one.options
