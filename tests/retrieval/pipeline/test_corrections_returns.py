"""Corrections of the reading and returns to an earlier topic, as kinds of turn (pt, es, en).

A correction ("no, I meant ...") drops the topic the previous turn was read on and searches
the one meant; a return ("voltando ao ...") carries the topic it names from several turns
back, not the last one. The conversations are written for these tests.
"""

from __future__ import annotations

import asyncio

import pytest

from retrieval.pipeline.plan import TurnBackends, TurnPlan, TurnRequest, plan_turn, turn_language
from retrieval.pipeline.retrieve import RetrievalSettings
from retrieval.pipeline.search import Scope
from retrieval.pipeline.text import normalize
from retrieval.pipeline.types import HistoryMessage, LexiconView
from tests.fakes import FakeSearcher

# Made-up chunk counts: rare words name topics, common ones ask about them.
_RARE = """ferias reembolso despesas viagem plano saude odontologico dependentes carencia
notebook laptop stolen attachments file files chat vacaciones gastos viaje licencia
maternidad vacation reimbursement expenses travel uniforme uniform contractors
estagiarios pj""".split()
_COMMON = "long take como quanto custa prazo send how cuanto tarda pays who partir".split()
_DF = {**{w: 3 for w in _RARE}, **{w: 90 for w in _COMMON}}


def _lexicon(words: set[str]) -> LexiconView:
    return LexiconView(df={w: n for w, n in _DF.items() if w in words}, n_chunks=200)


def _plan(question: str, users: list[str]) -> TurnPlan:
    history: list[HistoryMessage] = []
    for user in users:
        history += [HistoryMessage("user", user), HistoryMessage("assistant", "Veja a política.")]
    request = TurnRequest(
        question=question,
        history=tuple(history),
        scope=Scope(collection_id=1),
        glossary=(),
        settings=RetrievalSettings(mode="rules"),
        language=turn_language(question, tuple(history), explicit=None, default="pt"),
        default_language="pt",
    )
    backends = TurnBackends(searcher=FakeSearcher(), embedder=None, lexicon=_lexicon)
    return asyncio.run(plan_turn(request, backends))


def _queries(plan: TurnPlan) -> list[set[str]]:
    return [set(normalize(q.text).split()) for q in plan.outcome.rewrite.queries]


def _fired(plan: TurnPlan) -> set[str]:
    return {r.id for r in plan.outcome.rewrite.fired}


CORRECTIONS = [
    # (earlier user turns, correction, words meant, misread words)
    (
        ["quanto custa o plano de saúde?", "e o prazo de carência?"],
        "não, era o do plano odontológico",
        {"odontologico", "carencia"},
        {"saude"},
    ),
    (["how do I send a file in chat?"], "no, I meant attachments", {"attachments"}, {"file"}),
    (
        ["cuántos días de vacaciones tengo?", "y cuánto tarda el reembolso de gastos de viaje?"],
        "no, me refería a la licencia por maternidad",
        {"licencia", "maternidad"},
        {"reembolso", "gastos", "viaje", "vacaciones"},
    ),
]


@pytest.mark.parametrize(("users", "question", "meant", "misread"), CORRECTIONS)
def test_a_correction_searches_what_was_meant_without_the_misread_topic(
    users: list[str], question: str, meant: set[str], misread: set[str]
) -> None:
    plan = _plan(question, users)
    queries = _queries(plan)
    assert "correction" in _fired(plan)
    assert queries and all(not q & misread for q in queries)
    assert meant <= queries[0]


def test_a_correction_keeps_what_the_previous_turn_asked() -> None:
    plan = _plan("no, I meant attachments", ["how do I send a file in chat?"])
    assert {"attachments", "send"} <= _queries(plan)[0]


@pytest.mark.parametrize(
    ("users", "question", "kept", "meant"),
    [
        (
            ["how many vacation days do I get?"],
            "no, I meant for contractors",
            "vacation",
            "contractors",
        ),
        (["quantos dias de férias tem o estagiário?"], "não, quis dizer para PJ", "ferias", "pj"),
    ],
)
def test_a_correction_of_the_restriction_keeps_the_topic(
    users: list[str], question: str, kept: str, meant: str
) -> None:
    plan = _plan(question, users)
    assert "correction" in _fired(plan)
    assert {kept, meant} <= _queries(plan)[0]


@pytest.mark.parametrize(
    ("users", "question"),
    [
        (["quanto custa o plano de saúde?"], "não tenho dependentes, posso incluir meu pai?"),
        (["how many vacation days do I get?"], "no travel this year, can I carry them over?"),
    ],
)
def test_a_turn_opening_with_no_is_not_a_correction_unless_it_says_what_was_meant(
    users: list[str], question: str
) -> None:
    assert "correction" not in _fired(_plan(question, users))


RETURNS = [
    # (earlier user turns, return, words of the earlier topic, words of the last topic)
    (
        [
            "como peço reembolso de despesas de viagem?",
            "e quantos dias de férias eu tenho?",
            "posso vender parte das férias?",
        ],
        "voltando ao reembolso, qual o prazo?",
        {"reembolso", "despesas", "viagem", "prazo"},
        {"ferias"},
    ),
    (
        [
            "my laptop was stolen, what do I do?",
            "how many vacation days do I get?",
            "can I carry them over?",
        ],
        "going back to the laptop question, who pays for it?",
        {"laptop", "stolen", "pays"},
        {"vacation"},
    ),
    (
        [
            "cuántos días de vacaciones tengo?",
            "cómo pido reembolso de gastos de viaje?",
            "cuánto tarda?",
        ],
        "volviendo a lo de las vacaciones, se pueden partir?",
        {"vacaciones", "partir"},
        {"reembolso", "gastos", "viaje"},
    ),
]


@pytest.mark.parametrize(("users", "question", "earlier", "last"), RETURNS)
def test_a_return_carries_the_topic_it_names_not_the_last_one(
    users: list[str], question: str, earlier: set[str], last: set[str]
) -> None:
    plan = _plan(question, users)
    queries = _queries(plan)
    assert "return" in _fired(plan)
    assert queries and all(not q & last for q in queries)
    assert earlier <= queries[0]


@pytest.mark.parametrize(
    ("users", "question", "earlier", "last"),
    [
        (
            [
                "how do I get a travel expenses reimbursement?",
                "how many vacation days do I get?",
                "can I carry them over?",
            ],
            "sorry, the reimbursement I asked about earlier, how long does it take?",
            {"reimbursement", "travel", "expenses"},
            {"vacation"},
        ),
        (
            [
                "como peço reembolso de despesas de viagem?",
                "quantos dias de férias eu tenho?",
                "posso vender parte?",
            ],
            "e o reembolso que eu perguntei antes, qual o prazo?",
            {"reembolso", "despesas", "viagem"},
            {"ferias"},
        ),
    ],
)
def test_a_topic_said_to_come_from_earlier_is_carried_from_there(
    users: list[str], question: str, earlier: set[str], last: set[str]
) -> None:
    plan = _plan(question, users)
    queries = _queries(plan)
    assert "return" in _fired(plan)
    assert queries and all(not q & last for q in queries)
    assert earlier <= queries[0]


@pytest.mark.parametrize(
    ("users", "question"),
    [
        (["quanto custa o plano de saúde?"], "desculpa, e o odontológico?"),
        (["how many vacation days do I get?"], "sorry, and for contractors?"),
    ],
)
def test_an_apology_before_a_follow_up_is_no_correction(users: list[str], question: str) -> None:
    assert "correction" not in _fired(_plan(question, users))


def test_a_negation_then_what_it_is_corrects_the_reading() -> None:
    plan = _plan("não, é o odontológico", ["quanto custa o plano de saúde?"])
    assert "correction" in _fired(plan)
    assert all("saude" not in q for q in _queries(plan))


@pytest.mark.parametrize(
    ("users", "question", "meant", "misread"),
    [
        (["quanto custa o plano de saúde?"], "não, o odontológico", "odontologico", "saude"),
        (["how do I send a file in chat?"], "no, attachments", "attachments", "file"),
    ],
)
def test_a_negation_then_a_new_name_is_a_correction(
    users: list[str], question: str, meant: str, misread: str
) -> None:
    plan = _plan(question, users)
    assert "correction" in _fired(plan)
    assert all(misread not in q for q in _queries(plan))
    assert meant in _queries(plan)[0]


@pytest.mark.parametrize(
    ("users", "question"),
    [
        (["quanto custa o plano de saúde?"], "não, e para dependentes?"),
        (["quanto custa o plano de saúde?"], "não, quanto custa por mês?"),
        (["how do I send a file in chat?"], "no, how long does it take?"),
        (["quanto custa o plano de saúde?"], "não tenho dependentes"),
    ],
)
def test_a_negation_then_a_question_or_a_follow_up_is_no_correction(
    users: list[str], question: str
) -> None:
    assert "correction" not in _fired(_plan(question, users))


def test_going_back_to_work_is_no_return_to_a_topic() -> None:
    plan = _plan("can I go back to work after parental leave?", ["is the uniform free?"])
    assert "return" not in _fired(plan)


def test_a_return_to_a_topic_nobody_named_is_read_as_any_other_turn() -> None:
    plan = _plan("voltando ao uniforme, quem paga?", ["quantos dias de férias eu tenho?"])
    assert "return" not in _fired(plan)
