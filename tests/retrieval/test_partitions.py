"""Each collection's chunks in a partition of their own (retrieval.partitions, retrieval.0009):
a search reads its collection's indexes only, and chunks written before the collection had
a partition are found in the default one and move into its own, ids unchanged."""

from __future__ import annotations

import pytest
from django.db import connection

from chatrag.dev.fakes import HashingEmbedder
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    SourceDocument,
    chunk_partition_ensure,
    collection_get_or_create,
    documents_ingest,
)
from retrieval.models import Chunk, Collection, Document
from retrieval.partitions import DEFAULT, partition_name
from retrieval.pipeline import search as search_module
from retrieval.pipeline.search import Scope, SearchParams, SearchRequest
from retrieval.services import search_engine

pytestmark = pytest.mark.django_db(transaction=True)

EMBEDDER = HashingEmbedder(dim=384)


def _tables(collection: Collection) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM retrieval_chunk"
            " WHERE collection_id = %s",
            [collection.pk],
        )
        return {row[0] for row in cursor.fetchall()}


def _ingest(slug: str, text: str) -> Collection:
    collection = collection_get_or_create(slug=slug, name=slug)
    source = SourceDocument(external_id=f"{slug}-doc", title=slug, sections=(Section("", text),))
    report = documents_ingest(collection=collection, sources=[source], embedder=EMBEDDER)
    assert not report.errors, report.errors
    return collection


def _chunk_by_hand(collection: Collection, text: str) -> Chunk:
    """A chunk written without ingestion (its collection has no partition yet)."""
    document = Document.objects.create(
        collection=collection, external_id="by-hand", title="Ajuda de custo", checksum="x"
    )
    chunk = Chunk.objects.create(
        document=document,
        collection=collection,
        position=0,
        text=text,
        embedding=EMBEDDER.embed_passages([text])[0],
        fts_config="portuguese",
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE retrieval_chunk SET search_vector = to_tsvector('portuguese', text)"
            " WHERE id = %s",
            [chunk.pk],
        )
    return chunk


def test_ingestion_gives_the_collection_a_partition_with_its_own_indexes() -> None:
    collection = _ingest("own-table", "Auxílio creche: até 600 reais por mês por filho.")
    table = partition_name(collection.pk)
    assert _tables(collection) == {table}
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
        indexes = " ".join(row[0] for row in cursor.fetchall())
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [table])
        (options,) = cursor.fetchone()
    assert "USING hnsw" in indexes and "USING gin" in indexes
    assert options == ["toast_tuple_target=8160"]  # rows kept whole (retrieval.0008)
    assert chunk_partition_ensure(collection=collection) is False  # once only


def test_chunks_in_the_default_partition_are_searched_and_move_on_ingestion() -> None:
    collection = collection_get_or_create(slug="late", name="late")
    text = "A ajuda de custo de mudança cobre transporte e duas diárias de hotel."
    chunk = _chunk_by_hand(collection, text)
    assert _tables(collection) == {DEFAULT}

    engine, scope = search_engine(), Scope(collection_id=collection.pk, see_everything=True)
    request = SearchRequest("ajuda de custo mudança", EMBEDDER.embed_queries(["ajuda de custo"])[0])
    before = engine.search(request, scope, SearchParams())
    assert [hit.chunk_id for hit in before] == [chunk.pk]
    assert before[0].text_rank == 1 and before[0].vector_rank == 1

    _ingest("late", "O vale-transporte é descontado em até 6% do salário.")
    assert _tables(collection) == {partition_name(collection.pk)}
    assert Chunk.objects.filter(pk=chunk.pk, collection=collection).exists()  # same id
    after = engine.search(request, scope, SearchParams())
    assert after[0].chunk_id == chunk.pk and len(after) == 2


def test_a_search_reads_its_own_partition_only() -> None:
    """The plan names one partition: another collection's HNSW graph and GIN postings, and the
    default partition, are pruned at planning (before retrieval.0009, one table held all)."""
    mine = _ingest("mine", "Férias: 30 dias corridos por ano, em até três períodos.")
    other = _ingest("other", "Vacaciones: 23 días laborables al año en España.")
    scope = Scope(collection_id=mine.pk, see_everything=True)
    request = SearchRequest("férias dias", EMBEDDER.embed_queries(["férias dias"])[0])
    args = search_module._search_args(
        request, scope, SearchParams(), chunk_count=1, table_share=1.0, readable_chunks=1
    )
    sql = search_module._sql(True, "sql", search_module.ALL_CONFIGS)
    with search_engine().pool.connection() as conn:
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, args).fetchall())
    assert partition_name(mine.pk) in plan
    assert partition_name(other.pk) not in plan and DEFAULT not in plan
