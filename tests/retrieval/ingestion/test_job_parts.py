"""A large ingestion job split into parallel parts: one status, one progress, one report.

In process, the parts run one after another in any order; with real Celery workers (the
filesystem broker), two workers run parts side by side, and a worker killed mid-part fails
the job and queues it again exactly as an unsplit job, losing nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from werkzeug import Request, Response

from retrieval.ingestion import jobs
from retrieval.ingestion.jobs import (
    ingestion_job_part_run,
    ingestion_job_run,
    ingestion_jobs_sweep_stale,
)
from retrieval.models import Document, IngestionJob
from retrieval.services import default_collection
from tests.retrieval.ingestion.test_job_faults import (
    NAMES,
    WAIT_S,
    EmbeddingServer,
    _documents,
    _status,
    _wait,
    _write_kb,
)
from tests.support import celery_call, start_celery_worker, worker_env

Parts = list[tuple[str, int, list[list[str]]]]


@pytest.fixture
def parts_of_two(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Parts:
    """Jobs of more than two files split into parts of two; the parts' tasks are recorded."""
    settings.CHATRAG_INGEST_PART_FILES = 2
    sent: Parts = []
    monkeypatch.setattr(jobs, "_enqueue_part", lambda *args: sent.append(args))
    return sent


def _split(kb: Path, django_capture_on_commit_callbacks: Any) -> IngestionJob:
    job = IngestionJob.objects.create(collection=default_collection(), paths=[str(kb)])
    with django_capture_on_commit_callbacks(execute=True):
        ingestion_job_run(job_id=str(job.id))
    job.refresh_from_db()
    return job


@pytest.mark.django_db
def test_a_split_job_reports_progress_and_one_report_in_any_order(
    tmp_path: Path,
    parts_of_two: Parts,
    embedding_server: EmbeddingServer,
    remote_embedder: dict[str, str],
    django_capture_on_commit_callbacks: Any,
) -> None:
    kb = _write_kb(tmp_path / "kb")
    (kb / "notes.xyz").write_text("not a supported type", encoding="utf-8")
    job = _split(kb, django_capture_on_commit_callbacks)
    assert job.status == IngestionJob.Status.RUNNING
    assert [(index, len(files)) for _, index, files in parts_of_two] == [(0, 2), (1, 2), (2, 1)]
    assert (job.done, job.total) == (1, 6)  # the unsupported file is done already
    assert [p["status"] for p in job.report["parts"]] == ["queued"] * 3

    for job_id, index, files in reversed(parts_of_two):
        ingestion_job_part_run(job_id=job_id, index=index, files=files)
        job.refresh_from_db()
        if index:
            assert job.status == IngestionJob.Status.RUNNING
    assert job.status == IngestionJob.Status.DONE, job.report
    assert (job.done, job.total) == (6, 6)
    assert (job.report["added"], job.report["parts"], job.report["chunks_embedded"]) == (5, 3, 10)
    assert [e["document"] for e in job.report["errors"]] == [str((kb / "notes.xyz").resolve())]
    assert job.finished_at is not None
    assert _documents() == {name: [0, 1] for name in NAMES}
    with connection.cursor() as cursor:  # the last part rebuilt the vocabulary, once
        cursor.execute("SELECT count(*) FROM retrieval_vocabularyterm WHERE word = 'excecao'")
        assert cursor.fetchone()[0] >= 1

    # A part delivered again does nothing.
    job_id, index, files = parts_of_two[0]
    ingestion_job_part_run(job_id=job_id, index=index, files=files)
    assert IngestionJob.objects.get(pk=job.pk).report == job.report


@pytest.mark.django_db
def test_a_split_job_whose_embedder_fails_fails_as_one_job(
    tmp_path: Path,
    parts_of_two: Parts,
    embedding_server: EmbeddingServer,
    remote_embedder: dict[str, str],
    django_capture_on_commit_callbacks: Any,
) -> None:
    kb = _write_kb(tmp_path / "kb")
    embedding_server.fail_from = 2  # part 1 (a, b) goes through, then HTTP 500
    job = _split(kb, django_capture_on_commit_callbacks)
    for job_id, index, files in parts_of_two:
        ingestion_job_part_run(job_id=job_id, index=index, files=files)
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.FAILED
    assert job.report["error"] == (
        "the embedding server failed (embedding server answered HTTP 500): 3 document(s) "
        "not ingested, the others are complete; run the job again once it is back"
    )
    assert job.report["added"] == 2
    assert _documents() == {"a": [0, 1], "b": [0, 1]}

    embedding_server.fail_from = 0  # back: running again does only the rest
    parts_of_two.clear()
    again = _split(kb, django_capture_on_commit_callbacks)
    for job_id, index, files in parts_of_two:
        ingestion_job_part_run(job_id=job_id, index=index, files=files)
    again.refresh_from_db()
    assert again.status == IngestionJob.Status.DONE
    assert (again.report["added"], again.report["unchanged"]) == (3, 2)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.django_db
def test_the_sweep_judges_each_running_part(
    tmp_path: Path,
    parts_of_two: Parts,
    embedding_server: EmbeddingServer,
    remote_embedder: dict[str, str],
    django_capture_on_commit_callbacks: Any,
) -> None:
    import socket

    from django.utils import timezone

    kb = _write_kb(tmp_path / "kb")

    def split_with(part: dict[str, Any] | None) -> IngestionJob:
        job = _split(kb, django_capture_on_commit_callbacks)
        if part is not None:
            job.report["parts"][1] = {**job.report["parts"][1], **part}
        job.report["worker"]["heartbeat"] = "2000-01-01T00:00:00+00:00"  # the splitter's
        job.save()
        return job

    now = timezone.now().isoformat()
    dead = {"host": socket.gethostname(), "pid": _dead_pid(), "heartbeat": now}
    waiting = split_with(None)  # parts all queued: waiting for a worker, not dead
    reading = split_with({"status": "running", "worker": {**dead, "reading": str(kb / "c.md")}})
    killed = split_with({"status": "running", "worker": dead})

    with django_capture_on_commit_callbacks() as callbacks:
        retries = ingestion_jobs_sweep_stale()
    assert [r.report["retry_of"] for r in retries] == [str(killed.id)] and len(callbacks) == 1
    for job in (waiting, reading, killed):
        job.refresh_from_db()
    assert waiting.status == IngestionJob.Status.RUNNING
    assert reading.status == IngestionJob.Status.FAILED and "retried_as" not in reading.report
    assert reading.report["failed_on"] == "c.md"
    assert reading.report["error"] == (
        f"the worker stopped during this job (its worker process {dead['pid']} is gone); "
        "it was reading c.md, which is likely the cause: not queued again"
    )
    assert killed.status == IngestionJob.Status.FAILED
    assert killed.report["retried_as"] == str(retries[0].id)

    # The swept job's parts that were still to run do nothing.
    before = len(embedding_server.requests)
    for job_id, index, files in parts_of_two:
        if job_id == str(killed.id):
            ingestion_job_part_run(job_id=job_id, index=index, files=files)
    assert len(embedding_server.requests) == before
    assert Document.objects.count() == 0


# --- Real workers -----------------------------------------------------------------------------


class FirstRequestStalls(EmbeddingServer):
    """Only the first request waits for `released`: the part holding it is mid-way."""

    def _handle(self, request: Request) -> Response:
        if not self.requests:
            self.requests.append([])  # counted now, so later requests go straight through
            self.stalled.set()
            # Held until the test releases it; the bound is only a hang guard, longer than
            # every wait of the test (a loaded machine starts two workers slowly).
            self.released.wait(3 * WAIT_S)
            self.requests.pop(0)
        return super()._handle(request)


def _worker_env(tmp_path: Path, embedder: dict[str, str]) -> dict[str, str]:
    return worker_env(tmp_path, embedder, CHATRAG_INGEST_PART_FILES="2")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_workers_run_a_split_job_side_by_side(
    tmp_path: Path,
    embedding_server: EmbeddingServer,
    remote_embedder: dict[str, str],
    workers: list[subprocess.Popen[bytes]],
) -> None:
    kb = _write_kb(tmp_path / "kb")
    embedding_server.server.clear()  # this test's server answers instead
    server = FirstRequestStalls(embedding_server.server)
    env = _worker_env(tmp_path, remote_embedder)
    logs = [tmp_path / "worker-1.log", tmp_path / "worker-2.log"]
    for log in logs:
        workers.append(start_celery_worker(env, log, tmp_path))
    job = IngestionJob.objects.create(collection=default_collection(), paths=[str(kb)])
    celery_call(env, tmp_path, "retrieval.ingest_job", str(job.id))

    _wait(server.stalled.is_set, "a part's first request", workers[0], logs[0])

    def others_done() -> bool:
        job.refresh_from_db()
        parts = job.report.get("parts", [])
        return sum(p["status"] == "done" for p in parts) == 2

    # One part is held at the embedding server; the other worker does the other two.
    _wait(others_done, "the other parts, by the other worker", workers[1], logs[1])
    # Still running: the held part is not written. Its files may already count as read
    # (progress counts a file when it is read, before its batch is embedded).
    assert job.status == IngestionJob.Status.RUNNING and 3 <= job.done <= job.total == 5
    assert len(_documents()) < len(NAMES)
    pids = {p["worker"]["pid"] for p in job.report["parts"]}
    assert pids <= {w.pid for w in workers} and len(pids) == 2

    server.released.set()
    _wait(lambda: _status(job.id) != IngestionJob.Status.RUNNING, "the job", None, logs[0])
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.DONE, job.report
    assert (job.done, job.total, job.report["added"], job.report["parts"]) == (5, 5, 5, 3)
    assert _documents() == {name: [0, 1] for name in NAMES}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker_killed_mid_part_fails_the_split_job_and_its_retry_completes(
    tmp_path: Path,
    embedding_server: EmbeddingServer,
    remote_embedder: dict[str, str],
    workers: list[subprocess.Popen[bytes]],
) -> None:
    kb = _write_kb(tmp_path / "kb")
    env = _worker_env(tmp_path, remote_embedder)
    job = IngestionJob.objects.create(collection=default_collection(), paths=[str(kb)])
    embedding_server.stall_from = 2  # the first part taken is written; the next one hangs

    first_log = tmp_path / "worker-1.log"
    first = start_celery_worker(env, first_log, tmp_path)
    workers.append(first)
    celery_call(env, tmp_path, "retrieval.ingest_job", str(job.id))
    _wait(embedding_server.stalled.is_set, "the second part", first, first_log)
    # Exactly one part is written; which one the worker took first is the queue's order.
    parts = [NAMES[i : i + 2] for i in range(0, len(NAMES), 2)]
    assert _documents() in [{name: [0, 1] for name in part} for part in parts]

    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=120)
    embedding_server.stall_from = 0
    embedding_server.released.set()
    time.sleep(0.5)
    assert _status(job.id) == IngestionJob.Status.RUNNING  # nobody is left to say otherwise

    second_log = tmp_path / "worker-2.log"
    second = start_celery_worker(env, second_log, tmp_path)
    workers.append(second)
    _wait(lambda: _status(job.id) == IngestionJob.Status.FAILED, "the sweep", second, second_log)
    job.refresh_from_db()
    retry_id = job.report["retried_as"]
    assert job.report["error"] == (
        f"the worker stopped during this job (its worker process {first.pid} is gone); "
        f"queued again as job {retry_id}"
    )
    _wait(
        lambda: _status(retry_id) in {IngestionJob.Status.DONE, IngestionJob.Status.FAILED},
        "the retry",
        second,
        second_log,
    )
    retry = IngestionJob.objects.get(pk=retry_id)
    assert retry.status == IngestionJob.Status.DONE, retry.report
    assert (retry.report["retry_of"], retry.report["attempt"]) == (str(job.id), 2)
    # One part was never written; another may have been, by the new worker before its sweep.
    assert retry.report["parts"] == 3 and retry.report["added"] >= 2
    assert retry.report["added"] + retry.report["unchanged"] == len(NAMES)
    assert _documents() == {name: [0, 1] for name in NAMES}


def test_the_parts_engine_seconds_add_up_and_the_job_lasts_as_its_longest_part() -> None:
    from retrieval.ingestion.jobs import _reports_merge

    merged = _reports_merge(
        [
            {"added": 2, "chunks_embedded": 4, "embed_seconds": 1.25, "seconds": 2.0},
            {"added": 1, "chunks_embedded": 2, "embed_seconds": 2.5, "seconds": 3.0},
        ],
        listed=[],
        errors=[],
    )
    assert (merged["added"], merged["chunks_embedded"]) == (3, 6)
    assert (merged["embed_seconds"], merged["seconds"]) == (3.75, 3.0)
