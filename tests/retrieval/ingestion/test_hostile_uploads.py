"""Hostile uploads end to end: through the admin's upload, a real Celery worker and the real
database (issue 14, finding 5 and "could not test": 14 planned files never ran live).

Each file of `tests/hostile_uploads.py` (all under 1 MB) is uploaded as its own job through
the admin's upload page; the job's task is published with the project's own Celery
configuration to a worker process of its own, which embeds through a local HTTP embedding
server. Every file must be parsed, or refused with its reason in the job's report, and the
worker must go on to the next file. How long each took is printed (`-s`) from the worker's
own log, not asserted: the only time bound here is a hang guard.

Then the last line of defence: a worker killed while it reads a hostile file leaves its job
running; the sweep fails that job on its file and does not queue it again.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from retrieval.ingestion import jobs
from retrieval.ingestion.jobs import ingestion_jobs_sweep_stale
from retrieval.models import Document, IngestionJob
from retrieval.services import default_collection
from tests.hostile_uploads import HOSTILE_UPLOADS, MAX_BYTES, HostileUpload
from tests.retrieval.ingestion.test_job_faults import EmbeddingServer
from tests.support import celery_call, start_celery_worker, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HANG_GUARD_S = 180  # far above the parse limit (10 s) plus embedding: a hang, not a benchmark
FINISHED = {IngestionJob.Status.DONE, IngestionJob.Status.FAILED}


@pytest.fixture
def live(
    tmp_path: Path,
    settings: Any,
    remote_embedder: dict[str, str],
    embedding_server: EmbeddingServer,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """The worker's environment; uploads stored under tmp; the admin's enqueue recorded, so
    the test publishes each job to its own worker's broker folder."""
    settings.MEDIA_ROOT = tmp_path / "media"
    env = worker_env(tmp_path, remote_embedder)
    queued: list[str] = []
    monkeypatch.setattr(jobs, "_enqueue", queued.append)
    client = Client()
    client.force_login(User.objects.create_superuser("boss", password="pw-boss-123"))
    return {"env": env, "queued": queued, "client": client, "cwd": tmp_path}


def _upload(live: dict[str, Any], upload: HostileUpload, folder: Path) -> IngestionJob:
    """Write the file and post it to the admin's upload page, as a browser would."""
    path = folder / upload.name
    upload.write(path)
    size = path.stat().st_size
    assert 0 < size < MAX_BYTES, (upload.name, size)
    data = {
        "collection": default_collection().pk,
        "uploads": [SimpleUploadedFile(upload.name, path.read_bytes())],
        "folder": "hostile",
    }
    response = live["client"].post(reverse("admin:retrieval_document_add"), data)
    assert response.status_code == 302, response.context and response.context["form"].errors
    job = IngestionJob.objects.order_by("-created_at").first()
    assert job is not None and live["queued"][-1] == str(job.id)
    return job


def _wait(condition: Callable[[], bool], what: str, worker: Any, log: Path) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        text = log.read_text(errors="replace") if log.exists() else ""
        assert worker.poll() is None, f"the worker exited:\n{text[-3000:]}"
        assert time.monotonic() < deadline, f"never happened: {what}\n{text[-3000:]}"
        time.sleep(0.1)


def _status(job_id: Any) -> str:
    return str(IngestionJob.objects.get(pk=job_id).status)


def _task_seconds(log: Path, task_id: str) -> float | None:
    """The worker's own measure of a task: "Task … [id] succeeded in 1.23s"."""
    found = re.search(rf"\[{re.escape(task_id)}\] succeeded in ([\d.]+)s", log.read_text())
    return float(found.group(1)) if found else None


def _outcome(job: IngestionJob) -> str:
    """'parsed' when the file became a document, else the error the job reports for it."""
    errors = job.report.get("errors", [])
    if job.report.get("error"):
        return f"job failed: {job.report['error']}"
    if not errors and job.report.get("added") == 1:
        return "parsed"
    return "; ".join(e["error"] for e in errors) or f"nothing reported: {job.report}"


def test_every_hostile_upload_is_parsed_or_refused_and_the_worker_goes_on(
    live: dict[str, Any], workers: list[subprocess.Popen[bytes]]
) -> None:
    cwd: Path = live["cwd"]
    log = cwd / "worker.log"
    worker = start_celery_worker(live["env"], log, cwd)
    workers.append(worker)
    files = cwd / "files"
    files.mkdir()

    results: dict[str, tuple[str, float | None, int]] = {}
    for upload in HOSTILE_UPLOADS:
        job = _upload(live, upload, files)
        task_id = celery_call(live["env"], cwd, "retrieval.ingest_job", str(job.id))
        _wait(lambda j=job: _status(j.pk) in FINISHED, upload.name, worker, log)  # type: ignore[misc]
        job.refresh_from_db()
        results[upload.name] = (_outcome(job), _task_seconds(log, task_id), job.total)
        # Whatever the file did, nothing is queued again and the job is finished for good.
        assert ingestion_jobs_sweep_stale() == []
        assert IngestionJob.objects.filter(status=IngestionJob.Status.RUNNING).count() == 0

    print("\nworker seconds per hostile upload (shared machine, the worker's own log):")
    for upload in HOSTILE_UPLOADS:
        outcome, seconds, _ = results[upload.name]
        shown = f"{seconds:6.2f}" if seconds is not None else "     ?"
        print(f"  {upload.name:26} {shown} s  {outcome[:90]}")

    wrong = {
        name: outcome
        for (name, (outcome, _, _)), upload in zip(results.items(), HOSTILE_UPLOADS, strict=True)
        if not re.search(upload.outcome, outcome)
    }
    assert wrong == {}
    assert IngestionJob.objects.count() == len(HOSTILE_UPLOADS)  # one job per upload, no retry
    parsed = {n for n, (o, _, _) in results.items() if o == "parsed"}
    stored = set(Document.objects.values_list("external_id", flat=True))
    assert stored == {f"hostile/{Path(n).stem}" for n in parsed}
    # The worker is free: an ordinary upload after all of them is ingested.
    ordinary = HostileUpload("ferias.md", _ordinary, "parsed", "an ordinary file")
    job = _upload(live, ordinary, files)
    celery_call(live["env"], cwd, "retrieval.ingest_job", str(job.id))
    _wait(lambda: _status(job.pk) in FINISHED, "the ordinary file", worker, log)
    job.refresh_from_db()
    assert _outcome(job) == "parsed", job.report


def _ordinary(path: Path) -> None:
    path.write_text("# Férias\n\nTrinta dias por ano, em até três períodos.\n", encoding="utf-8")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def test_a_worker_killed_reading_a_hostile_file_fails_its_job_without_a_retry(
    live: dict[str, Any], workers: list[subprocess.Popen[bytes]]
) -> None:
    cwd: Path = live["cwd"]
    log = cwd / "worker.log"
    # A parse limit far above what the file takes, so that the worker is still reading it
    # when it is killed (as a worker killed by the OOM killer mid-parse would be).
    env = {**live["env"], "CHATRAG_PARSE_SECONDS": "600"}
    worker = start_celery_worker(env, log, cwd)
    workers.append(worker)
    files = cwd / "files"
    files.mkdir()
    [bomb] = [u for u in HOSTILE_UPLOADS if u.name == "nested_divs.html"]
    job = _upload(live, bomb, files)
    celery_call(env, cwd, "retrieval.ingest_job", str(job.id))

    def reading() -> bool:
        job.refresh_from_db()
        return str(job.report.get("worker", {}).get("reading", "")).endswith(bomb.name)

    _wait(reading, "the worker reading the file", worker, log)
    parsers = _children(worker.pid)
    os.kill(worker.pid, signal.SIGSTOP)  # frozen: its heartbeat cannot move on any more
    assert reading(), "the parse finished before the worker could be stopped"
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    for pid in parsers:  # the parse child, orphaned
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert _status(job.pk) == IngestionJob.Status.RUNNING  # nobody is left to say otherwise

    assert ingestion_jobs_sweep_stale() == []  # the dead worker's job is not queued again
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.FAILED
    assert job.report["failed_on"] == bomb.name
    assert "not queued again" in job.report["error"]
    assert IngestionJob.objects.count() == 1
    assert ingestion_jobs_sweep_stale() == []  # and never later either
    assert IngestionJob.objects.count() == 1
