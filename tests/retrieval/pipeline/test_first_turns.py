"""A turn with nothing before it searches what the no-rewrite mode searches (issue 36, item 1).

Unless a named rule changes its words (a spelling fix, a glossary expansion, a split, a name
or an amount dropped, a country's other names), and then the rewrite's `fired` names it.
Runs `plan_turn` on a fake search (`tests.fakes.FakeSearcher`) with the corpus's words as a
fake vocabulary: no database.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.pipeline.fusion import Hit
from retrieval.pipeline.plan import TurnBackends, TurnPlan, TurnRequest, plan_turn, turn_language
from retrieval.pipeline.retrieve import RetrievalSettings, RewriteMode
from retrieval.pipeline.rewrite_rules import lexicon_words, rewrite_with_rules
from retrieval.pipeline.search import Scope, SearchRequest
from retrieval.pipeline.text import normalize
from retrieval.pipeline.types import (
    SEARCH_RULES,
    WORD_RULES,
    GlossaryEntry,
    HistoryMessage,
    LexiconView,
    RewriteInput,
)
from tests.fakes import FakeSearcher

# The words a small HR collection knows (pt, es, en), with made-up chunk counts.
_CORPUS = """
ferias dias ano prazo reembolso despesas viagem plano saude dependentes vale refeicao
alimentacao licenca maternidade uruguai uruguay brasil valor quanto custa pedir documentos
vacaciones reembolso gastos viaje plan salud dependientes dias licencia cuanto cuesta pedir
vacation days year travel expenses reimbursement health plan dependants leave policy
parental request documents allowance meal how many
"""
_DF = {word: 3 for word in _CORPUS.split()}
_CORRECTIONS = {
    "reembolzo": "reembolso",
    "dependentez": "dependentes",
    "reimbursment": "reimbursement",
}
GLOSSARY = (
    GlossaryEntry("VR", "vale-refeição", language="pt"),
    GlossaryEntry("PTO", "paid time off", language="en"),
)


def _lexicon(words: set[str]) -> LexiconView:
    known = {w: df for w, df in _DF.items() if w in words}
    corrections = {w: c for w, c in _CORRECTIONS.items() if w in words}
    return LexiconView(df=known, n_chunks=200, corrections=corrections)


def _found(request: SearchRequest) -> list[Hit]:
    """Pages whose title shares a word with the request, the more shared the higher."""
    pages = [
        (1, "ferias", "Férias: dias por ano"),
        (2, "reembolso", "Reembolso de despesas de viagem"),
        (3, "saude", "Plano de saúde: dependentes"),
        (4, "vr", "Vale-refeição no Uruguai"),
        (5, "travel", "Travel expenses reimbursement"),
        (6, "leave", "Parental leave policy"),
    ]
    asked = set(normalize(request.text).replace("?", " ").split())
    hits = []
    for doc, external, title in pages:
        shared = len(asked & set(normalize(title).replace(":", " ").split()))
        if shared:
            hits.append(Hit(doc, doc, external, title, "", title, 0, "", doc, doc, shared / 10))
    return sorted(hits, key=lambda h: -h.score)


def _plan(
    question: str, mode: RewriteMode, history: tuple[HistoryMessage, ...] = ()
) -> tuple[TurnPlan, FakeSearcher]:
    language = turn_language(question, history, explicit=None, default="pt")
    request = TurnRequest(
        question=question,
        history=history,
        scope=Scope(collection_id=1),
        glossary=tuple(e for e in GLOSSARY if e.language in ("", language)),
        settings=RetrievalSettings(mode=mode),
        language=language,
        default_language="pt",
    )
    searcher = FakeSearcher(_found)
    backends = TurnBackends(searcher=searcher, embedder=None, lexicon=_lexicon)
    return asyncio.run(plan_turn(request, backends)), searcher


def _searched(plan: TurnPlan, searcher: FakeSearcher) -> dict[str, Any]:
    """Everything that decides a turn's search and ranking, comparable across modes."""
    outcome = plan.outcome
    return {
        "requests": [(r.text, r.area, r.full_text, r.vector) for r in searcher.requests],
        "queries": [(q.text, q.type, q.weight, q.area, q.reading) for q in outcome.queries],
        "ranked": [m.hit.external_id for m in outcome.merged],
        "passages": [m.hit.external_id for m in outcome.passages],
        "pinned": outcome.pinned,
        "kind": plan.kind,
    }


def _named(plan: TurnPlan) -> set[str]:
    return {r.id for r in plan.outcome.rewrite.fired} & SEARCH_RULES


# Self-contained first questions that need nothing rewritten: searched exactly as asked.
AS_ASKED = [
    "quantos dias de férias eu tenho por ano?",
    "Qual o prazo do reembolso de despesas de viagem ?",  # a space before the mark
    "como incluir  dependentes no plano de saúde?",  # two spaces
    "¿cuántos días de vacaciones tengo por año?",
    "¿Cómo pido el reembolso de gastos de viaje?",
    "How many vacation days do I get per year?",
    "what is the parental leave policy",
    "¿Cuánto cuesta el plan de salud para dependientes?",
]


@pytest.mark.parametrize("question", AS_ASKED)
def test_a_first_question_with_nothing_to_rewrite_searches_exactly_what_none_searches(
    question: str,
) -> None:
    none_plan, none_searcher = _plan(question, "none")
    rules_plan, rules_searcher = _plan(question, "rules")
    assert not _named(rules_plan), rules_plan.outcome.rewrite.fired
    assert _searched(rules_plan, rules_searcher) == _searched(none_plan, none_searcher)
    assert rules_searcher.requests, "the turn was searched"


# First questions a named rule rewrites: a typo, a glossary term, two questions, a name or a
# country (the rule that must be named for each).
REWRITTEN = [
    ("qual o prazo do reembolzo?", "spelling"),
    ("How do I get a travel reimbursment?", "spelling"),
    ("quanto é o VR por dia?", "glossary"),
    ("how much PTO do I get per year?", "glossary"),
    ("quantos dias de férias tenho por ano? e como peço reembolso de despesas de viagem?", "split"),
    ("quanto custa o plano de saúde para a Mariana Kuhn?", "drop_words"),
    ("qual o valor do vale-refeição no Uruguai?", "place_names"),
    (" ".join(["como incluir dependentes no plano de saúde"] * 8) + "?", "truncate"),
]


@pytest.mark.parametrize(("question", "rule"), REWRITTEN)
def test_a_first_question_searched_otherwise_than_none_names_the_rule_that_changed_it(
    question: str, rule: str
) -> None:
    none_plan, none_searcher = _plan(question, "none")
    rules_plan, rules_searcher = _plan(question, "rules")
    assert _searched(rules_plan, rules_searcher) != _searched(none_plan, none_searcher)
    assert rule in _named(rules_plan), rules_plan.outcome.rewrite.fired


def test_a_first_question_never_runs_the_follow_up_probes() -> None:
    # The topic probe and the last reply's probe are evidence about a conversation: a turn
    # with nothing before it sends only its own queries.
    plan, searcher = _plan("e o prazo disso?", "rules")
    sent = [r.text for r in searcher.requests]
    assert len(sent) == len(plan.outcome.queries)
    assert not plan.outcome.rewrite.topic
    assert all(q.reading is None for q in plan.outcome.queries)


_WORDS = st.sampled_from(
    [*_CORPUS.split(), "VR", "PTO", "reembolzo", "Mariana", "Uruguai", "e", "y", "and", "?", "  "]
)


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(_WORDS, min_size=1, max_size=12), language=st.sampled_from(["pt", "es", "en"])
)
def test_any_first_turn_is_searched_as_typed_unless_a_word_rule_is_named(
    words: list[str], language: str
) -> None:
    question = " ".join(words)
    inp = RewriteInput(question, (), GLOSSARY, language=language, default_language="pt")
    result = rewrite_with_rules(inp, _lexicon(lexicon_words(inp)))
    named = {r.id for r in result.fired} & WORD_RULES
    if result.queries and not named and not result.no_search:
        assert [(q.text, q.type, q.weight, q.area) for q in result.queries] == [
            (question, "normalize", 1.0, None)
        ]


@pytest.mark.parametrize(
    ("question", "limit"), [("0\r", 1), ("prazo do reembolso de despesas de viagem", 12)]
)
def test_a_first_turn_searched_as_typed_still_keeps_to_the_query_limit(
    question: str, limit: int
) -> None:
    from retrieval.pipeline.types import LexiconView, RewriteInput

    inp = RewriteInput(question, (), (), 3, limit, None, "pt")
    result = rewrite_with_rules(inp, LexiconView())
    assert result.queries and all(0 < len(q.text) <= limit for q in result.queries)
    assert "truncate" in {r.id for r in result.fired}
