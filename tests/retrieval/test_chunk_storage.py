"""A chunk's row keeps its embedding inline: the vector leg's exact scan of a small collection
reads heap pages only, not the TOAST table's index and pages for every distance."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from chatrag.dev.fakes import HashingEmbedder
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import SourceDocument, collection_get_or_create, documents_ingest
from retrieval.models import Chunk

pytestmark = pytest.mark.django_db

# Distinct words, so the chunk's text and search vector are as long as real ones (~3 kB a row
# with a 384-dimension vector, past the 2 kB where Postgres would move the vector out).
TEXT = " ".join(f"palavra{n} regra{n * 7} prazo{n * 13}" for n in range(60))


def test_a_chunk_row_of_three_kilobytes_keeps_its_vector_in_the_heap(settings: Any) -> None:
    settings.CHATRAG_CHUNK_CHARS = 4000  # the text in one chunk
    collection = collection_get_or_create(slug="inline", name="inline")
    source = SourceDocument(external_id="d", title="Regras", sections=(Section("", TEXT),))
    documents_ingest(collection=collection, sources=[source], embedder=HashingEmbedder(dim=384))
    chunk = Chunk.objects.get(collection=collection)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_size(c.*), pg_column_size(c.embedding) FROM retrieval_chunk c "
            "WHERE id = %s",
            [chunk.pk],
        )
        row_bytes, vector_bytes = cursor.fetchone()
        cursor.execute(  # the collection's own partition (retrieval.partitions)
            "SELECT reltoastrelid::regclass::text FROM pg_class "
            "WHERE oid = (SELECT tableoid FROM retrieval_chunk WHERE id = %s)",
            [chunk.pk],
        )
        (toast,) = cursor.fetchone()
        cursor.execute(f"SELECT count(*) FROM {toast}")  # noqa: S608 - the catalog's own name
        (toasted,) = cursor.fetchone()
    assert vector_bytes > 1500 and row_bytes > 2500  # a row past the default 2 kB threshold
    assert toasted == 0
