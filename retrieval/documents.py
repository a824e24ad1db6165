"""Staff document management: upload files for ingestion, re-index, delete.

Uploaded files are kept under MEDIA_ROOT/uploads (each upload in its own folder), because a
document's `source_path` is what a later re-index reads again.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone
from django.utils.text import get_valid_filename

from retrieval.ingestion.jobs import ingestion_job_create
from retrieval.ingestion.services import vocabulary_rebuild
from retrieval.models import Collection, Document, IngestionJob


class UploadError(ValueError):
    """An uploaded file or folder name cannot be accepted."""


def uploads_root() -> Path:
    return Path(settings.MEDIA_ROOT) / "uploads"


def clean_folder(folder: str) -> str:
    """A relative folder for the documents' ids ("pt", "rh/beneficios"); no "..", no root."""
    parts = []
    for part in PurePosixPath(folder.strip().replace("\\", "/")).parts:
        if part in {"", ".", "/"}:
            continue
        if part == "..":
            raise UploadError("the folder may not contain '..'")
        cleaned = get_valid_filename(part)
        if cleaned:
            parts.append(cleaned)
    return "/".join(parts)


@transaction.atomic
def documents_upload(
    *,
    collection: Collection,
    files: Sequence[UploadedFile],
    folder: str = "",
    groups: Sequence[str] = (),
    user: User | None = None,
) -> IngestionJob:
    """Store the files and queue their ingestion; a document's id is `folder/name`."""
    if not files:
        raise UploadError("choose at least one file")
    batch = uploads_root() / f"{timezone.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"
    target = batch / clean_folder(folder)
    target.mkdir(parents=True, exist_ok=True)
    for upload in files:
        name = get_valid_filename(Path(upload.name or "upload").name)
        with (target / name).open("wb") as handle:
            for block in upload.chunks():
                handle.write(block)
    return ingestion_job_create(collection=collection, paths=[batch], user=user, groups=groups)


def documents_reindex(
    *, documents: Iterable[Document], user: User | None = None
) -> list[IngestionJob]:
    """Queue a re-index job per collection for these documents."""
    by_collection: dict[int, list[int]] = defaultdict(list)
    collections: dict[int, Collection] = {}
    for document in documents:
        by_collection[document.collection_id].append(document.pk)
        collections[document.collection_id] = document.collection
    with transaction.atomic():
        return [
            ingestion_job_create(
                collection=collections[cid], paths=[], user=user, document_ids=sorted(ids)
            )
            for cid, ids in by_collection.items()
        ]


def documents_delete(*, documents: Iterable[Document]) -> int:
    """Delete documents and their passages, recount the vocabulary, drop uploaded files."""
    documents = list(documents)
    root = uploads_root().resolve()
    files = [
        Path(d.source_path).resolve()
        for d in documents
        if d.source_path and Path(d.source_path).resolve().is_relative_to(root)
    ]
    collections = {d.collection_id: d.collection for d in documents}
    with transaction.atomic():
        Document.objects.filter(pk__in=[d.pk for d in documents]).delete()
        for collection in collections.values():
            vocabulary_rebuild(collection=collection)
    for path in files:  # only our own uploads, never a server folder that was ingested
        path.unlink(missing_ok=True)
        _remove_empty_parents(path.parent, stop=root)
    return len(documents)


def _remove_empty_parents(folder: Path, *, stop: Path) -> None:
    while folder != stop and folder.is_relative_to(stop):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
