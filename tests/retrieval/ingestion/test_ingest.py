"""Ingestion against the real database: idempotence, atomic replacement, clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from chatrag.dev.fakes import HashingEmbedder
from retrieval.embeddings import EmbeddingError, get_embedder
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    SourceDocument,
    document_set_groups,
    documents_ingest,
    sources_from_paths,
)
from retrieval.models import Chunk, Document, VocabularyTerm
from retrieval.services import collection_language, default_collection

pytestmark = pytest.mark.django_db


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return path


def ingest(folder: Path, embedder: Any = None, prune: bool = False) -> Any:
    items, total = sources_from_paths([folder])
    return documents_ingest(
        collection=default_collection(),
        sources=items,
        embedder=embedder or get_embedder(),
        total=total,
        prune_missing=prune,
    )


def test_second_run_skips_unchanged_and_replaces_changed(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pt/ferias.md",
        "---\nlang: pt\n---\n# Férias\n\n## Regras\n\nTrinta dias corridos.",
    )
    write(tmp_path, "pt/vr.md", "# Vale-refeição\n\nR$ 48 por dia útil.")
    first = ingest(tmp_path)
    assert (first.count("added"), first.chunks_embedded) == (2, 2)
    second = ingest(tmp_path)
    assert second.count("unchanged") == 2 and second.chunks_embedded == 0

    old_ids = set(Chunk.objects.filter(document__external_id="pt/vr").values_list("id", flat=True))
    write(tmp_path, "pt/vr.md", "# Vale-refeição\n\nR$ 52 por dia útil a partir de 2026.")
    third = ingest(tmp_path)
    assert third.count("updated") == 1 and third.count("unchanged") == 1
    document = Document.objects.get(external_id="pt/vr")
    assert document.version == 2
    chunks = list(document.chunks.all())
    assert len(chunks) == 1 and "52" in chunks[0].text and chunks[0].id not in old_ids
    assert chunks[0].search_vector is not None and chunks[0].fts_config == "portuguese"


def test_deleted_file_is_pruned(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n\nPrimeiro documento sobre férias.")
    gone = write(tmp_path, "b.md", "# B\n\nSegundo documento sobre reembolso.")
    ingest(tmp_path)
    gone.unlink()
    report = ingest(tmp_path, prune=True)
    assert report.count("removed") == 1
    assert list(Document.objects.values_list("external_id", flat=True)) == ["a"]


def test_corrupt_file_is_reported_and_the_rest_ingested(tmp_path: Path, capsys: Any) -> None:
    write(tmp_path, "ok.md", "# Viagens\n\nDiárias de R$ 120.")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\n garbage that is not a pdf")
    (tmp_path / "empty.txt").write_bytes(b"")
    call_command("ingest", str(tmp_path), "--quiet")
    out, err = capsys.readouterr()
    assert "1 added" in out and "2 failed" in out
    assert "broken.pdf" in err and "empty.txt" in err
    assert Document.objects.filter(external_id="ok").exists()


class FailingEmbedder(HashingEmbedder):
    name = "failing"

    def embed_passages(self, texts: Any) -> Any:
        raise EmbeddingError("embedding server unreachable")


def test_embedder_failure_writes_nothing_half_done(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n\nTexto.")
    ingest(tmp_path, embedder=HashingEmbedder())
    write(tmp_path, "a.md", "# A\n\nTexto novo que precisa de embedding.")
    report = ingest(tmp_path, embedder=FailingEmbedder())
    assert report.errors and "unreachable" in report.errors[0].error
    # the old version is intact: same text, same version
    document = Document.objects.get(external_id="a")
    assert document.version == 1
    assert document.chunks.get().text == "Texto."


def test_model_change_reembeds_everything(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n\nTexto sobre férias.")
    ingest(tmp_path, embedder=HashingEmbedder())
    report = ingest(tmp_path)  # the real embedder: a different model name
    assert report.count("updated") == 1
    assert default_collection().embedding_model == get_embedder().name
    assert Document.objects.get().embedding_model == get_embedder().name


def test_vocabulary_counts_accent_free_words(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# Férias\n\nRegras de férias e reembolso.")
    write(tmp_path, "b.md", "# Reembolso\n\nComo pedir reembolso.")
    ingest(tmp_path)
    vocabulary = dict(VocabularyTerm.objects.values_list("word", "df"))
    assert vocabulary["ferias"] == 1 and vocabulary["reembolso"] == 2


def test_changing_groups_updates_chunk_access(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# A\n\nTexto.")
    ingest(tmp_path)
    document = Document.objects.get()
    document_set_groups(document=document, group_names=["rh-restrito"])
    chunk = document.chunks.get()
    assert chunk.is_public is False and chunk.group_ids == [document.groups.get().id]


@pytest.mark.django_db(transaction=True)  # the search engine reads on its own connection
def test_versions_from_front_matter_reach_the_search_hits(tmp_path: Path) -> None:
    from retrieval.pipeline.search import Scope, SearchRequest
    from retrieval.services import search_engine, search_params

    write(
        tmp_path,
        "pt/remoto-2024.md",
        "---\nsuperseded_by: pt/remoto-2026\neffective: 2024-01-01\n---\n"
        "# Trabalho remoto 2024\n\nDois dias de trabalho remoto por semana.",
    )
    write(
        tmp_path,
        "pt/remoto-2026.md",
        "---\neffective: 2026-01-01\n---\n# Trabalho remoto\n\nTrês dias de trabalho remoto.",
    )
    report = ingest(tmp_path)
    assert report.count("added") == 2
    old = Document.objects.get(external_id="pt/remoto-2024")
    assert (old.superseded, old.superseded_by, str(old.effective_date)) == (
        True,
        "pt/remoto-2026",
        "2024-01-01",
    )
    assert not Document.objects.get(external_id="pt/remoto-2026").superseded
    scope = Scope(collection_id=default_collection().id, see_everything=True)
    hits = search_engine().search(SearchRequest("trabalho remoto", []), scope, search_params())
    by_document = {h.external_id: h for h in hits}
    assert by_document["pt/remoto-2024"].superseded
    assert by_document["pt/remoto-2026"].effective is not None
    assert by_document["pt/remoto-2026"].effective.year == 2026
    # Staff may mark a page replaced by hand: the next search sees it, nothing re-embedded.
    Document.objects.filter(external_id="pt/remoto-2026").update(superseded=True)
    again = search_engine().search(SearchRequest("trabalho remoto", []), scope, search_params())
    assert all(h.superseded for h in again)


def test_a_text_that_does_not_tell_its_language_takes_the_configured_default(
    tmp_path: Path, settings: Any
) -> None:
    settings.CHATRAG_DEFAULT_LANGUAGE = "es"
    assert SourceDocument(external_id="x", title="", sections=(Section("", "42"),)).language == "es"
    assert collection_language(collection=default_collection()) == "es"  # no documents yet
    write(tmp_path, "numbers.md", "# 42\n\n1 2 3")
    ingest(tmp_path)
    assert Document.objects.get(external_id="numbers").language == "es"


def test_a_document_over_the_passage_limit_is_refused_with_its_count(
    tmp_path: Path, settings: Any
) -> None:
    settings.CHATRAG_MAX_PASSAGES_PER_DOCUMENT = 3
    settings.CHATRAG_CHUNK_CHARS = 200
    settings.CHATRAG_CHUNK_OVERLAP = 0
    write(tmp_path, "long.md", "# Longo\n\n" + "\n\n".join(["a: b " * 40] * 10))
    write(tmp_path, "short.md", "# Curto\n\nUma linha sobre férias.")
    report = ingest(tmp_path, embedder=HashingEmbedder())
    (refused,) = [o for o in report.outcomes if o.status == "error"]
    assert refused.external_id == "long"
    assert "passages, more than CHATRAG_MAX_PASSAGES_PER_DOCUMENT (3)" in refused.error
    assert report.chunks_embedded == 1  # nothing of the long one was embedded
    assert not Document.objects.filter(external_id="long").exists()
