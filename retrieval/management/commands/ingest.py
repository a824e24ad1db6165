"""`manage.py ingest PATH...`: add or update documents from files and folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from retrieval.embeddings import get_embedder
from retrieval.ingestion.services import (
    collection_get_or_create,
    documents_ingest,
    sources_from_paths,
)


class Command(BaseCommand):
    help = "Ingest Markdown, text, HTML, PDF and DOCX files (folders are walked recursively)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--collection", default=settings.CHATRAG_COLLECTION)
        parser.add_argument(
            "--prune",
            action="store_true",
            help="remove documents whose file was in these folders and is gone "
            "(never documents that came from elsewhere, such as admin uploads)",
        )
        parser.add_argument("--quiet", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["collection"]
        collection = collection_get_or_create(slug=slug, name=slug.replace("-", " ").title())
        items, total = sources_from_paths(options["paths"])
        bar = tqdm(total=total, unit="file", disable=options["quiet"], leave=False)

        def progress(done: int, total: int, name: str) -> None:
            bar.n = done
            bar.set_postfix_str(Path(name).name[-30:])
            bar.refresh()

        report = documents_ingest(
            collection=collection,
            sources=items,
            embedder=get_embedder(),
            total=total,
            progress=progress,
            prune_under=[p for p in options["paths"] if p.is_dir()] if options["prune"] else (),
        )
        bar.close()
        rate = report.chunks_embedded / report.seconds if report.seconds else 0.0
        self.stdout.write(
            f"{report.count('added')} added, {report.count('updated')} updated, "
            f"{report.count('unchanged')} unchanged, {report.count('removed')} removed, "
            f"{len(report.errors)} failed; {report.chunks_embedded} chunks "
            f"and {report.lines_embedded} answer lines embedded "
            f"in {report.seconds:.1f}s ({rate:.1f} chunks/s)"
        )
        for outcome in report.errors:
            self.stderr.write(f"error: {outcome.external_id}: {outcome.error}")
        if report.errors and len(report.errors) == len(report.outcomes):
            raise CommandError("no document could be ingested")
