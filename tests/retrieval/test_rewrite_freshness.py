"""What the rule rewrite reads of a collection is read again on the next turn after a change.

The rewrite keeps per-process caches: tokenised texts and each glossary's words, keyed by the
texts and the entries themselves; the words' corpus statistics and the reader's chunk count,
for one version of the vocabulary (each rebuild bumps it). These pin that a word ingested
after one turn, and a glossary entry edited after one, reach the very next rewrite, on the
real database.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from retrieval.embeddings import get_embedder
from retrieval.glossary_io import glossary_import
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import SourceDocument, documents_ingest
from retrieval.models import GlossaryEntry
from retrieval.pipeline.retrieve import RetrievalOutcome, retrieve
from retrieval.pipeline.search import Scope
from retrieval.services import (
    VocabularyLexicon,
    default_collection,
    glossary_for,
    retrieval_settings,
    search_engine,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _turn(collection: Any, question: str) -> RetrievalOutcome:
    """One turn's retrieval as the chat runs it (rules), read afresh from the database."""
    engine = search_engine()
    scope = Scope(collection_id=collection.id, see_everything=True)
    return asyncio.run(
        retrieve(
            question=question,
            history=[],
            glossary=glossary_for(collection=collection),
            scope=scope,
            engine=engine,
            embedder=None,
            lexicon=VocabularyLexicon(engine, collection.id, scope=scope),
            settings=retrieval_settings(mode="rules"),
            language="pt",
        )
    )


def _document(external_id: str, title: str, text: str) -> SourceDocument:
    return SourceDocument(external_id, title, (Section("", text),), language="pt")


def test_a_word_ingested_after_a_turn_reaches_the_next_rewrite() -> None:
    collection = default_collection()
    documents_ingest(
        collection=collection,
        sources=[_document("pt/ferias", "Férias", "As férias são marcadas no portal.")],
        embedder=get_embedder(),
        total=1,
    )
    question = "qual o prazo do reembolzo?"
    # One chunk: too few to weigh words, so no spelling either (and both are now kept).
    assert _turn(collection, question).rewrite.corrections == {}
    documents_ingest(
        collection=collection,
        sources=[_document("pt/reembolso", "Reembolso", "O reembolso de despesas sai em 10 dias.")],
        embedder=get_embedder(),
        total=1,
    )
    rewrite = _turn(collection, question).rewrite
    assert rewrite.corrections == {"reembolzo": "reembolso"}
    assert rewrite.queries[0].text == "qual o prazo do reembolso?"


def test_a_glossary_edit_reaches_the_next_rewrite() -> None:
    collection = default_collection()
    glossary_import(collection=collection, data=[{"term": "VR", "expansion": "vale-refeição"}])
    assert _turn(collection, "qual o valor do VR?").queries[0].text == (
        "qual o valor do VR (vale-refeição)?"
    )
    glossary_import(
        collection=collection,
        data=[
            {"term": "VR", "expansion": "vale-refeição ou vale-alimentação", "area": "beneficios"}
        ],
    )
    query = _turn(collection, "qual o valor do VR?").queries[0]
    assert query.text == "qual o valor do VR (vale-refeição ou vale-alimentação)?"
    assert query.area == "beneficios"
    GlossaryEntry.objects.filter(collection=collection, term="VR").update(active=False)
    assert _turn(collection, "qual o valor do VR?").rewrite.glossary_hits == []


def test_a_turn_expands_a_term_with_its_own_languages_entry() -> None:
    """Imported with a language each, "IRPF" expands to Portuguese words in a Portuguese
    turn and to Spanish ones in a Spanish turn (the turn request keeps only the turn's
    language's entry); the export gives back both."""
    from retrieval.glossary_io import glossary_export
    from retrieval.services import turn_request_for

    collection = default_collection()
    glossary_import(
        collection=collection,
        data=[
            {"term": "IRPF", "expansion": "imposto de renda da pessoa física", "language": "pt"},
            {"term": "IRPF", "expansion": "Impuesto sobre la Renta", "language": "es"},
        ],
    )
    assert GlossaryEntry.objects.filter(collection=collection, term="IRPF").count() == 2
    scope = Scope(collection_id=collection.id, see_everything=True)
    pt = turn_request_for(
        question="quando declaro o IRPF?", history=[], collection=collection, scope=scope
    )
    es = turn_request_for(
        question="¿cuándo se declara el IRPF?", history=[], collection=collection, scope=scope
    )
    assert (pt.language, [e.expansion for e in pt.glossary if e.term == "IRPF"]) == (
        "pt",
        ["imposto de renda da pessoa física"],
    )
    assert (es.language, [e.expansion for e in es.glossary if e.term == "IRPF"]) == (
        "es",
        ["Impuesto sobre la Renta"],
    )
    exported = [e for e in glossary_export(collection=collection) if e["term"] == "IRPF"]
    assert [e["language"] for e in exported] == ["es", "pt"]
