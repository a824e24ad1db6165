"""Celery tasks: thin wrappers that take ids and call one service."""

from __future__ import annotations

from celery import shared_task

from retrieval.ingestion.jobs import ingestion_job_run


@shared_task(name="retrieval.ingest_job", acks_late=True)
def ingest_job(job_id: str) -> None:
    """Run an ingestion job (uploaded files or server paths), recording progress on the job."""
    ingestion_job_run(job_id=job_id)
