"""Celery's limits on an ingestion task, and what the worker does when it loses one (issue 38).

A real Celery worker (prefork, one pool process: the solo pool enforces no time limit) on the
filesystem broker and the test database, with an embedder that misbehaves in its pool process
(`worker_embedders`). Every job ends FAILED with a reason that says what happened, and none is
queued again by the broker or by the app beyond MAX_ATTEMPTS. The waits are hang guards, never
performance assertions.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from retrieval.ingestion.jobs import MAX_ATTEMPTS
from retrieval.models import IngestionJob
from retrieval.services import default_collection
from tests.retrieval.ingestion.test_job_faults import _status, _wait
from tests.support import celery_call, start_celery_worker, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
EMBEDDERS = "tests.retrieval.ingestion.worker_embedders"
FINISHED = {IngestionJob.Status.DONE, IngestionJob.Status.FAILED}


def _kb(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "ferias.md").write_text("# Férias\n\n## Prazo\n\n30 dias por ano.\n", "utf-8")
    return folder


def _worker(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]], embedder: str, **limits: str
) -> tuple[dict[str, str], subprocess.Popen[bytes], Path]:
    env = worker_env(tmp_path, {"CHATRAG_EMBEDDER": f"{EMBEDDERS}.{embedder}"}, **limits)
    log = tmp_path / "worker.log"
    worker = start_celery_worker(env, log, tmp_path, pool="prefork")
    workers.append(worker)
    return env, worker, log


def _queue(env: dict[str, str], tmp_path: Path) -> IngestionJob:
    job = IngestionJob.objects.create(
        collection=default_collection(), paths=[str(_kb(tmp_path / "kb"))]
    )
    celery_call(env, tmp_path, "retrieval.ingest_job", str(job.id))
    return job


def test_a_job_past_its_soft_time_limit_fails_with_the_reason_and_is_not_queued_again(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    env, worker, log = _worker(
        tmp_path,
        workers,
        "SlowEmbedder",
        CHATRAG_INGEST_JOB_SECONDS="3",
        CHATRAG_INGEST_JOB_HARD_SECONDS="40",
    )
    job = _queue(env, tmp_path)
    _wait(lambda: _status(job.id) in FINISHED, "the job's end", worker, log)
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.FAILED
    assert job.report["error"].startswith(
        "the job ran past its time limit (3 s, CHATRAG_INGEST_JOB_SECONDS) and was stopped; "
        "not queued again"
    )
    assert job.finished_at is not None
    assert IngestionJob.objects.count() == 1


def test_a_job_past_its_hard_time_limit_is_killed_failed_and_not_queued_again(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """The soft limit cannot interrupt a call stuck in C code; the hard one kills the pool
    process, and the worker's main process marks the job (before: "running" for ever)."""
    env, worker, log = _worker(
        tmp_path,
        workers,
        "DeafEmbedder",
        CHATRAG_INGEST_JOB_SECONDS="2",
        CHATRAG_INGEST_JOB_HARD_SECONDS="4",
    )
    job = _queue(env, tmp_path)
    _wait(lambda: _status(job.id) in FINISHED, "the job's end", worker, log)
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.FAILED
    assert job.report["error"] == (
        "the job ran past its hard time limit (4 s, CHATRAG_INGEST_JOB_HARD_SECONDS) and its "
        "process was killed; not queued again: split the upload, or raise the limit"
    )
    assert IngestionJob.objects.count() == 1
    assert worker.poll() is None  # the worker lives on with a new pool process


def test_a_job_whose_process_is_killed_twice_is_failed_for_good_without_a_restart(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """A pool process killed mid-job (out of memory, say) left the job "running" until a
    worker started again or someone uploaded; now the worker's main process fails it at
    once, queues it again, and fails the retry for good when it is killed too."""
    env, worker, log = _worker(tmp_path, workers, "DyingEmbedder")
    job = _queue(env, tmp_path)
    _wait(lambda: _status(job.id) in FINISHED, "the first attempt's end", worker, log)
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.FAILED
    retry_id = job.report["retried_as"]
    assert job.report["error"] == (
        "the worker stopped during this job (its process was lost: Worker exited "
        f"prematurely: signal 9 (SIGKILL)); queued again as job {retry_id}"
    )
    _wait(lambda: _status(retry_id) in FINISHED, "the retry's end", worker, log)
    retry = IngestionJob.objects.get(pk=retry_id)
    assert retry.status == IngestionJob.Status.FAILED
    assert retry.report["attempt"] == MAX_ATTEMPTS
    assert retry.report["error"].endswith(f"not queued again after {MAX_ATTEMPTS} attempts")
    assert "retried_as" not in retry.report
    assert IngestionJob.objects.count() == 2
    assert worker.poll() is None
