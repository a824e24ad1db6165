"""Celery tasks of the retrieval app, as the worker finds them (`autodiscover_tasks`).

Each task is a thin wrapper that takes ids and calls one service; it is declared beside the
service that queues it (`retrieval.ingestion.jobs`), so that queueing a task imports nothing
back. This module imports them for the worker, sweeps stale jobs when a worker starts, and
fails the job of a task the worker lost (killed at its hard time limit, or its pool process
died), which no code of the task itself can do.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.exceptions import TimeLimitExceeded, WorkerLostError
from celery.signals import task_failure, worker_ready

from retrieval.ingestion.jobs import (
    INGEST_TASKS,
    ingest_job,
    ingest_job_part,
    ingestion_job_lost,
    ingestion_jobs_sweep_stale,
)

__all__ = ["ingest_job", "ingest_job_part"]
logger = logging.getLogger(__name__)


@worker_ready.connect
def _sweep_stale_jobs(**kwargs: Any) -> None:
    """A starting worker fails and re-queues the jobs a dead worker left "running"."""
    try:
        ingestion_jobs_sweep_stale()
    except Exception:  # e.g. the database is not up yet; the next ingest sweeps again
        logger.exception("could not sweep stale ingestion jobs")


@task_failure.connect
def _job_task_lost(
    sender: Any = None,
    args: Any = None,
    exception: BaseException | None = None,
    **kwargs: Any,
) -> None:
    """The worker's main process lost an ingestion task: fail its job now (issue 38).

    Sent by the main process for a hard time limit and for a pool process that died; the
    task's own failures never reach here (the task records them on its job and returns).
    """
    if getattr(sender, "name", None) not in INGEST_TASKS:
        return
    if not isinstance(exception, TimeLimitExceeded | WorkerLostError) or not args:
        return
    try:
        ingestion_job_lost(job_id=str(args[0]), exception=exception)
    except Exception:  # the sweep judges the job later (a worker start, the next job)
        logger.exception("could not fail ingestion job %s", args[0])
