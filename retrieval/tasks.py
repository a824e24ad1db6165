"""Celery tasks of the retrieval app, as the worker finds them (`autodiscover_tasks`).

Each task is a thin wrapper that takes ids and calls one service; it is declared beside the
service that queues it (`retrieval.ingestion.jobs`), so that queueing a task imports nothing
back. This module imports them for the worker and sweeps stale jobs when a worker starts.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready

from retrieval.ingestion.jobs import ingest_job, ingest_job_part, ingestion_jobs_sweep_stale

__all__ = ["ingest_job", "ingest_job_part"]
logger = logging.getLogger(__name__)


@worker_ready.connect
def _sweep_stale_jobs(**kwargs: Any) -> None:
    """A starting worker fails and re-queues the jobs a dead worker left "running"."""
    try:
        ingestion_jobs_sweep_stale()
    except Exception:  # e.g. the database is not up yet; the next ingest sweeps again
        logger.exception("could not sweep stale ingestion jobs")
