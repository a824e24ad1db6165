"""One file's embedding is limited in time; the files after it are still done (issue 38).

An upload held the worker for 24 minutes, and every job behind it waited. Embedding a file's
passages may take CHATRAG_INGEST_FILE_SECONDS: a file still being embedded then is failed with
that reason and not stored, and the job goes on. The clock is the test's (no waiting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from chatrag.dev.fakes import HashingEmbedder
from retrieval.embeddings import Vector
from retrieval.ingestion import services
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    SourceDocument,
    collection_get_or_create,
    documents_ingest,
)
from retrieval.models import Chunk, Document


class SlowOnEmbedder(HashingEmbedder):
    """Each call costs `cost` seconds of the test's clock when a text holds `slow_word`."""

    def __init__(self, clock: list[float], slow_word: str, cost: float) -> None:
        super().__init__(dim=384)
        self.clock, self.slow_word, self.cost = clock, slow_word, cost
        self.batches: list[list[str]] = []

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        self.batches.append(list(texts))
        self.clock[0] += self.cost if any(self.slow_word in t for t in texts) else 0.01
        return super().embed_passages(texts)


def _document(name: str, passages: int, word: str) -> SourceDocument:
    sections = tuple(Section(f"Seção {i}", f"{word} {name} {i}. " * 5) for i in range(passages))
    return SourceDocument(external_id=name, title=name, sections=sections)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(services, "_clock", lambda: now[0])
    return now


@pytest.mark.django_db
def test_a_file_over_the_limit_is_failed_with_its_reason_and_the_next_files_are_done(
    settings: Any, clock: list[float]
) -> None:
    settings.CHATRAG_EMBEDDING_BATCH = 2
    settings.CHATRAG_INGEST_FILE_SECONDS = 10
    embedder = SlowOnEmbedder(clock, "lento", cost=6)
    collection = collection_get_or_create(slug="limited", name="limited")
    sources = [
        _document("antes", 1, "rapido"),
        _document("pesado", 20, "lento"),  # 10 calls of 6 s: cut after the second
        _document("depois", 3, "rapido"),
    ]
    report = documents_ingest(collection=collection, sources=sources, embedder=embedder)

    outcomes = {o.external_id: o for o in report.outcomes}
    assert outcomes["antes"].status == "added"
    assert outcomes["depois"].status == "added"
    assert outcomes["pesado"].status == "error"
    assert outcomes["pesado"].error.startswith(
        "took more than 10 s to embed (CHATRAG_INGEST_FILE_SECONDS)"
    )
    assert set(
        Document.objects.filter(collection=collection).values_list("external_id", flat=True)
    ) == {
        "antes",
        "depois",
    }
    assert Chunk.objects.filter(document__external_id="depois").count() == 3
    # The slow file's passages stopped being embedded once it was over its limit.
    slow_texts = [t for batch in embedder.batches for t in batch if "lento" in t]
    assert 0 < len(slow_texts) <= 6
    assert report.chunks_embedded == 1 + 3


@pytest.mark.django_db
def test_without_a_limit_or_within_it_every_file_is_stored(
    settings: Any, clock: list[float]
) -> None:
    settings.CHATRAG_EMBEDDING_BATCH = 2
    settings.CHATRAG_INGEST_FILE_SECONDS = 0
    collection = collection_get_or_create(slug="unlimited", name="unlimited")
    embedder = SlowOnEmbedder(clock, "lento", cost=6)
    report = documents_ingest(
        collection=collection, sources=[_document("pesado", 20, "lento")], embedder=embedder
    )
    assert report.count("added") == 1
    assert Chunk.objects.filter(document__external_id="pesado").count() == 20

    settings.CHATRAG_INGEST_FILE_SECONDS = 1000
    report = documents_ingest(
        collection=collection, sources=[_document("outro", 20, "lento")], embedder=embedder
    )
    assert report.count("added") == 1
