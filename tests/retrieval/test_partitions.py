"""Each collection's chunks in a partition of their own (retrieval.partitions, retrieval.0009):
ingestion makes it, with its own indexes, and a search reads that partition only."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from chatrag.dev.fakes import HashingEmbedder
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    SourceDocument,
    chunk_partition_ensure,
    collection_get_or_create,
    documents_ingest,
)
from retrieval.models import Chunk, Collection, Document
from retrieval.partitions import partition_name
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


def test_ingestion_gives_the_collection_a_partition_with_its_own_indexes() -> None:
    collection = _ingest("own-table", "Auxílio creche: até 600 reais por mês por filho.")
    table = partition_name(collection.pk)
    assert _tables(collection) == {table}
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
        indexes = " ".join(row[0] for row in cursor.fetchall())
        cursor.execute("SELECT reloptions, reltuples FROM pg_class WHERE relname = %s", [table])
        options, rows_planned = cursor.fetchone()
    assert "USING hnsw" in indexes and "USING gin" in indexes
    assert options == ["toast_tuple_target=8160"]  # rows kept whole (retrieval.0008)
    assert rows_planned == 1  # analysed by the ingestion: never analysed reads -1
    assert chunk_partition_ensure(collection=collection) is False  # once only


def test_a_chunk_of_a_collection_without_its_partition_is_refused() -> None:
    """Only ingestion writes chunks, and it gives the collection its partition first; a chunk
    written any other way fails loudly instead of landing where no search's plan looks."""
    collection = collection_get_or_create(slug="no-table", name="no-table")
    document = Document.objects.create(
        collection=collection, external_id="by-hand", title="Ajuda de custo", checksum="x"
    )
    chunk = Chunk(
        document=document,
        collection=collection,
        position=0,
        text="A ajuda de custo de mudança cobre transporte.",
        embedding=EMBEDDER.embed_passages(["ajuda de custo"])[0],
    )
    with pytest.raises(IntegrityError, match="no partition"), transaction.atomic():
        chunk.save()
    assert chunk_partition_ensure(collection=collection) is True
    chunk.save()
    assert _tables(collection) == {partition_name(collection.pk)}


def test_a_search_reads_its_own_partition_only() -> None:
    """The plan names one partition: another collection's HNSW graph and GIN postings are
    pruned at planning (before retrieval.0009, one table held them all)."""
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
    assert partition_name(other.pk) not in plan
