"""Celery tasks: thin wrappers that take ids and call one service."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from retrieval.ingestion.jobs import (
    ingestion_job_part_run,
    ingestion_job_run,
    ingestion_jobs_sweep_stale,
)

logger = logging.getLogger(__name__)


@shared_task(name="retrieval.ingest_job", acks_late=True)
def ingest_job(job_id: str) -> None:
    """Run an ingestion job (uploaded files or server paths), recording progress on the job."""
    ingestion_job_run(job_id=job_id)


@shared_task(name="retrieval.ingest_job_part", acks_late=True)
def ingest_job_part(job_id: str, index: int, files: list[list[str]]) -> None:
    """Run one part of a split ingestion job: these (file, root) pairs."""
    ingestion_job_part_run(job_id=job_id, index=index, files=files)


@shared_task(name="retrieval.evaluate_run", acks_late=True)
def evaluate_run(run_id: int) -> None:
    """Run an evaluation started from the admin, recording progress and the report."""
    from retrieval.quality.runs import evaluation_run_execute

    evaluation_run_execute(run_id=run_id)


@worker_ready.connect
def _sweep_stale_jobs(**kwargs: Any) -> None:
    """A starting worker fails and re-queues the jobs a dead worker left "running"."""
    try:
        ingestion_jobs_sweep_stale()
    except Exception:  # e.g. the database is not up yet; the next ingest sweeps again
        logger.exception("could not sweep stale ingestion jobs")
