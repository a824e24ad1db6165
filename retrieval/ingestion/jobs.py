"""Ingestion jobs: the `ingest` service run in the worker, with progress stored on the job."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from retrieval.embeddings import get_embedder
from retrieval.models import Collection, IngestionJob

from .services import documents_ingest, sources_from_paths


def ingestion_job_create(
    *, collection: Collection, paths: list[Path], user: User | None = None
) -> IngestionJob:
    """Record a job and enqueue it once the transaction commits (the worker must see it)."""
    from retrieval.tasks import ingest_job

    job = IngestionJob.objects.create(
        collection=collection,
        created_by=user if user is not None and user.is_authenticated else None,
        paths=[str(p) for p in paths],
    )
    transaction.on_commit(lambda: ingest_job.delay(str(job.id)))
    return job


def ingestion_job_run(*, job_id: str) -> IngestionJob:
    """Parse, embed and store the job's files; a failing file is reported, not fatal."""
    job = IngestionJob.objects.select_related("collection").get(pk=job_id)
    job.status = IngestionJob.Status.RUNNING
    job.save(update_fields=["status"])
    try:
        items, total = sources_from_paths([Path(p) for p in job.paths])
        IngestionJob.objects.filter(pk=job.pk).update(total=total)

        def progress(done: int, total: int, name: str) -> None:
            IngestionJob.objects.filter(pk=job.pk).update(done=done, total=total)

        report = documents_ingest(
            collection=job.collection,
            sources=items,
            embedder=get_embedder(),
            total=total,
            progress=progress,
        )
        job.refresh_from_db()
        job.report = report.as_dict()
        job.status = IngestionJob.Status.DONE
    except Exception as exc:  # the job records why it failed; the worker keeps running
        job.refresh_from_db()
        job.report = {"error": f"{exc.__class__.__name__}: {exc}"[:1000]}
        job.status = IngestionJob.Status.FAILED
    job.finished_at = timezone.now()
    job.save(update_fields=["report", "status", "finished_at"])
    return job
