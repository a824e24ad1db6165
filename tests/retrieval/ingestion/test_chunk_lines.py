"""Each chunk's answer lines are embedded at ingestion and stored beside it (ChunkLine).

The texts are the very lines the extractive answer scores (`line_texts`, the answer's own
splitter), so a turn finds each line's vector by its text and embeds nothing of its own. A
changed document's lines are replaced; a document stored before lines existed gets them on the
next run; what is embedded per chunk is bounded (issue 38).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pytest

from chatrag.dev.fakes import HashingEmbedder
from retrieval.embeddings import Vector
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    LINE_VECTORS_VERSION,
    SourceDocument,
    collection_get_or_create,
    documents_ingest,
    line_embedding_text,
)
from retrieval.models import Chunk, ChunkLine, Document
from retrieval.pipeline.answer import Passage, line_texts

POLICY = (
    "O reembolso de despesas de viagem é pedido no portal em até 30 dias. Guarde as notas "
    "fiscais originais; sem elas o pedido volta.\n\n"
    "Passos para pedir:\n"
    "1. Abra o portal de despesas\n"
    "2. Anexe as notas fiscais\n"
    "3. Envie para o seu gestor aprovar\n\n"
    "| Cargo | Limite diário | Prazo |\n"
    "|---|---|---|\n"
    "| Analista | R$ 150 | 30 dias |\n"
    "| Gerente | R$ 250 | 30 dias |\n\n"
    "Itens que não são reembolsados:\n"
    "- bebidas alcoólicas em qualquer refeição\n"
    "- multas de trânsito e estacionamento\n\n"
    "Dúvidas sobre o reembolso vão para o financeiro pelo canal de atendimento interno."
)


class RecordingEmbedder(HashingEmbedder):
    """The fake embedder, recording each text it embeds."""

    def __init__(self) -> None:
        super().__init__(dim=384)
        self.texts: list[str] = []

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        self.texts += texts
        return super().embed_passages(texts)


def _source(text: str = POLICY, external_id: str = "reembolso") -> SourceDocument:
    return SourceDocument(
        external_id=external_id,
        title="Reembolso de despesas",
        sections=(Section("Viagens", text),),
        language="pt",
    )


def _stored(collection: Any) -> dict[int, list[ChunkLine]]:
    lines: dict[int, list[ChunkLine]] = {}
    for line in ChunkLine.objects.filter(collection=collection).order_by("chunk_id", "position"):
        lines.setdefault(line.chunk_id, []).append(line)
    return lines


def _passage(chunk: Chunk) -> Passage:
    document = chunk.document
    return Passage(
        0,
        document.title,
        chunk.heading,
        chunk.text,
        document.external_id,
        chunk.position,
        document.language,
    )


@pytest.mark.django_db
def test_ingestion_stores_one_unit_vector_per_answer_line_of_each_chunk(settings: Any) -> None:
    # Small chunks: the later ones open mid-sentence, a line the answer shows as "…".
    settings.CHATRAG_CHUNK_CHARS, settings.CHATRAG_CHUNK_OVERLAP = 260, 60
    embedder = RecordingEmbedder()
    collection = collection_get_or_create(slug="lines", name="lines")
    prose = (
        " Quem viaja a serviço por mais de cinco dias seguidos recebe também uma ajuda de custo"
        " para lavanderia, paga junto com o salário do mês seguinte à viagem, desde que o"
        " relatório de viagem tenha sido aprovado pelo gestor imediato dentro do prazo."
    )
    report = documents_ingest(
        collection=collection, sources=[_source(POLICY + "\n\n" + prose * 2)], embedder=embedder
    )

    chunks = list(Chunk.objects.filter(collection=collection).select_related("document"))
    assert len(chunks) >= 3
    stored = _stored(collection)
    reference = HashingEmbedder(dim=384)
    for chunk in chunks:
        texts = line_texts(_passage(chunk), "pt")
        assert texts, chunk.text
        assert [line.text for line in stored[chunk.id]] == texts
        for line in stored[chunk.id]:
            vector = [float(x) for x in line.embedding]
            assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-3)
            # The line after its page title and section heading, as its chunk is embedded.
            context = line_embedding_text(chunk.document.title, chunk.heading, line.text)
            want = reference.embed_passages([context])[0]
            assert vector == pytest.approx(want, abs=2e-3)  # half precision
    assert report.lines_embedded == sum(len(lines) for lines in stored.values())
    every = [line.text for lines in stored.values() for line in lines]
    # Steps, table rows with their column names, list items and sentences: each a line.
    assert "Anexe as notas fiscais" in every
    assert any(t.startswith("Gerente — Limite diário: R$ 250") for t in every)
    assert "multas de trânsito e estacionamento" in every
    assert any(t.startswith("…") for t in every)  # a chunk's cut opening, as the answer shows it


@pytest.mark.django_db
def test_a_changed_document_has_its_lines_replaced_and_an_unchanged_one_keeps_them() -> None:
    embedder = RecordingEmbedder()
    collection = collection_get_or_create(slug="lines-changed", name="lines-changed")
    documents_ingest(collection=collection, sources=[_source()], embedder=embedder)
    before = {line.text for lines in _stored(collection).values() for line in lines}
    assert "Guarde as notas fiscais originais; sem elas o pedido volta." in before

    changed = POLICY.replace("em até 30 dias", "em até 45 dias").replace(
        " Guarde as notas fiscais originais; sem elas o pedido volta.", ""
    )
    report = documents_ingest(collection=collection, sources=[_source(changed)], embedder=embedder)
    assert report.count("updated") == 1
    chunk_ids = set(Chunk.objects.filter(collection=collection).values_list("id", flat=True))
    stored = _stored(collection)
    assert set(stored) == chunk_ids  # no line of a replaced chunk is left
    after = {line.text for lines in stored.values() for line in lines}
    assert "O reembolso de despesas de viagem é pedido no portal em até 45 dias." in after
    assert not any("30 dias." in t and "portal" in t for t in after)
    assert "Guarde as notas fiscais originais; sem elas o pedido volta." not in after

    embedder.texts.clear()
    again = documents_ingest(collection=collection, sources=[_source(changed)], embedder=embedder)
    assert again.count("unchanged") == 1 and again.lines_embedded == 0
    assert embedder.texts == []


@pytest.mark.django_db
def test_a_document_stored_before_line_vectors_gets_them_on_the_next_run() -> None:
    embedder = RecordingEmbedder()
    collection = collection_get_or_create(slug="lines-backfill", name="lines-backfill")
    documents_ingest(
        collection=collection,
        sources=[_source(), _source("Vale-refeição de R$ 30 por dia útil.", "vale")],
        embedder=embedder,
    )
    chunks = list(Chunk.objects.filter(collection=collection).values_list("id", "embedding"))
    full = {k: [line.text for line in v] for k, v in _stored(collection).items()}
    # As a database from before line vectors has it: no lines, its documents at version 0.
    ChunkLine.objects.filter(chunk__document__external_id="reembolso").delete()
    Document.objects.filter(external_id="reembolso").update(lines_version=0)

    embedder.texts.clear()
    report = documents_ingest(
        collection=collection,
        sources=[_source(), _source("Vale-refeição de R$ 30 por dia útil.", "vale")],
        embedder=embedder,
    )
    assert report.count("unchanged") == 2 and report.chunks_embedded == 0
    # Only the missing document's lines were embedded; its chunks are the same rows.
    embedded = [t.rsplit("\n", 1)[-1] for t in embedder.texts]  # the lines, context left out
    assert sorted(embedded) == sorted(t for k, v in full.items() for t in v if k != max(full))
    assert Document.objects.get(external_id="reembolso").lines_version == LINE_VECTORS_VERSION
    assert list(Chunk.objects.filter(collection=collection).values_list("id", "embedding")) == [
        (i, pytest.approx(e)) for i, e in chunks
    ]
    assert {k: [line.text for line in v] for k, v in _stored(collection).items()} == full


@pytest.mark.django_db
def test_what_a_chunk_embeds_for_its_lines_is_bounded(settings: Any) -> None:
    settings.CHATRAG_LINE_VECTORS_PER_CHUNK = 3
    settings.CHATRAG_LINE_VECTOR_CHARS = 30
    many = "Itens:\n" + "\n".join(f"- item de número {n} da lista longa" for n in range(60))
    embedder = RecordingEmbedder()
    collection = collection_get_or_create(slug="lines-bounded", name="lines-bounded")
    documents_ingest(collection=collection, sources=[_source(many)], embedder=embedder)
    stored = _stored(collection)
    assert stored and all(len(lines) <= 3 for lines in stored.values())
    line_texts_embedded = [
        t.rsplit("\n", 1)[-1] for t in embedder.texts if t.count("item de número") == 1
    ]
    assert line_texts_embedded and all(len(t) <= 30 for t in line_texts_embedded)
    # The stored text stays the whole line (the answer looks it up by it).
    assert any(len(line.text) > 30 for lines in stored.values() for line in lines)


@pytest.mark.django_db
def test_without_line_vectors_nothing_more_is_embedded(settings: Any) -> None:
    settings.CHATRAG_LINE_VECTORS = False
    embedder = RecordingEmbedder()
    collection = collection_get_or_create(slug="lines-off", name="lines-off")
    report = documents_ingest(collection=collection, sources=[_source()], embedder=embedder)
    assert len(embedder.texts) == report.chunks_embedded
    assert not ChunkLine.objects.filter(collection=collection).exists()


@pytest.mark.django_db
def test_an_evaluation_corpus_stored_before_line_vectors_gets_them_and_keeps_its_chunks(
    tmp_path: Any,
) -> None:
    from conversations.quality.datasets import evaluation_collection_load

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"id": "d1", "title": "Reembolso", "text": POLICY, "lang": "pt"}) + "\n",
        encoding="utf-8",
    )
    first = evaluation_collection_load(corpus=corpus, embedder=RecordingEmbedder())
    collection = first.collection
    chunks = sorted(Chunk.objects.filter(collection=collection).values_list("id", flat=True))
    assert ChunkLine.objects.filter(collection=collection).exists()
    assert evaluation_collection_load(corpus=corpus, embedder=RecordingEmbedder()).reused
    # As migrated from before line vectors: no lines, version 0. The corpus is not reused as
    # it is: its lines are embedded, its chunks are the same rows.
    ChunkLine.objects.filter(collection=collection).delete()
    Document.objects.filter(collection=collection).update(lines_version=0)
    embedder = RecordingEmbedder()
    again = evaluation_collection_load(corpus=corpus, embedder=embedder)
    assert not again.reused and again.report is not None
    assert again.report.chunks_embedded == 0 and again.report.lines_embedded > 0
    assert (
        sorted(Chunk.objects.filter(collection=collection).values_list("id", flat=True)) == chunks
    )
    assert ChunkLine.objects.filter(collection=collection).count() == again.report.lines_embedded
    assert evaluation_collection_load(corpus=corpus, embedder=RecordingEmbedder()).reused
