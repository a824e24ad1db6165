"""What storing each chunk's answer-line vectors (retrieval.models.ChunkLine) costs.

For each corpus (default: ptes-dev and ptes-aurora), its documents are ingested twice into
scratch collections with the configured embedder, once with CHATRAG_LINE_VECTORS off and once
on, and the script prints: lines per chunk, ingestion seconds without and with lines, bytes
per line vector (`pg_column_size`: a halfvec is 2 bytes a dimension plus an 8-byte header),
the line table's bytes (`pg_total_relation_size`, heap, TOAST and index, prorated to the
scratch collection's rows) and the same extrapolated to 100,000 chunks. The scratch
collections are deleted at the end. Timings are one run on a machine that may be shared:
read them as an order of magnitude and compare the two columns, not other runs.

    .venv/bin/python scripts/bench_line_vectors.py [--json out.json] [corpus.jsonl ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.db.models import Count  # noqa: E402
from django.test import override_settings  # noqa: E402

from conversations.quality.datasets import corpus_sources  # noqa: E402
from retrieval.embeddings import get_embedder  # noqa: E402
from retrieval.ingestion.services import collection_get_or_create, documents_ingest  # noqa: E402
from retrieval.models import Chunk, Collection  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
DEFAULT = [SHARED / "ptes-dev/corpus.jsonl", SHARED / "ptes-aurora/corpus.jsonl"]
AT = 100_000  # chunks, the size the figures are extrapolated to


def _ingest(corpus: Path, slug: str, lines: bool) -> tuple[Collection, float]:
    Collection.objects.filter(slug=slug).delete()
    collection = collection_get_or_create(slug=slug, name=slug, is_evaluation=True)
    with override_settings(CHATRAG_LINE_VECTORS=lines):
        started = time.perf_counter()
        report = documents_ingest(
            collection=collection,
            sources=list(corpus_sources(corpus, language=None)),
            embedder=get_embedder(),
        )
        seconds = time.perf_counter() - started
    assert not report.errors, report.errors
    return collection, seconds


def measure(corpus: Path) -> dict[str, Any]:
    name = corpus.parent.name
    off, seconds_off = _ingest(corpus, f"bench-lines-{name}-off", lines=False)
    on, seconds_on = _ingest(corpus, f"bench-lines-{name}-on", lines=True)
    chunks = Chunk.objects.filter(collection=on).count()
    per_chunk = list(
        Chunk.objects.filter(collection=on).annotate(n=Count("lines")).values_list("n", flat=True)
    )
    lines = sum(per_chunk)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT avg(pg_column_size(embedding)), avg(length(text)),"
            " (SELECT count(*) FROM retrieval_chunkline),"
            " pg_total_relation_size('retrieval_chunkline')"
            " FROM retrieval_chunkline WHERE collection_id = %s",
            [on.pk],
        )
        vector_bytes, text_chars, all_rows, table_bytes = cursor.fetchone()
    # The table holds other collections' lines too: this collection's share of its bytes.
    collection_bytes = table_bytes * lines / all_rows if all_rows else 0
    for collection in (off, on):
        collection.delete()
    per_line = collection_bytes / lines if lines else 0.0
    extra = seconds_on - seconds_off
    return {
        "corpus": name,
        "chunks": chunks,
        "lines": lines,
        "lines_per_chunk": round(lines / chunks, 2) if chunks else 0.0,
        "lines_per_chunk_median": statistics.median(per_chunk) if per_chunk else 0,
        "lines_per_chunk_max": max(per_chunk, default=0),
        "line_chars_mean": round(float(text_chars or 0), 1),
        "seconds_without_lines": round(seconds_off, 1),
        "seconds_with_lines": round(seconds_on, 1),
        "bytes_per_vector": round(float(vector_bytes or 0), 1),
        "bytes_per_line_row": round(per_line, 1),
        "table_bytes": round(collection_bytes),
        f"table_gb_at_{AT}": round(per_line * lines / chunks * AT / 1e9, 2) if chunks else 0,
        f"extra_cpu_hours_at_{AT}": round(extra / chunks * AT / 3600, 2) if chunks else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpora", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [measure(corpus) for corpus in args.corpora]
    for row in rows:
        print(json.dumps(row, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
