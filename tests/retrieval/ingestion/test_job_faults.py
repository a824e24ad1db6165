"""Ingestion jobs when things break: the embedding server, and the worker itself.

The embedding server is a real local HTTP server speaking OpenAI's `/v1/embeddings`; the
worker is a real Celery worker process on the filesystem broker, killed with SIGKILL.
After each fault: the job says what happened, every document is complete or absent, and
running again completes without redoing what was done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from chatrag.dev.fakes import HashingEmbedder
from retrieval.embeddings import _load
from retrieval.ingestion.jobs import ingestion_job_run
from retrieval.models import Chunk, Document, IngestionJob
from retrieval.services import default_collection
from tests.support import celery_call, start_celery_worker, worker_env

WAIT_S = 120  # a hang guard, never a performance assertion
NAMES = ["a", "b", "c", "d", "e"]


def _write_kb(folder: Path) -> Path:
    """Five documents of two passages each (two sections longer than a chunk together)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        body = f"# Política {name}\n\n## Regra\n\n" + f"Regra {name}. " * 100
        body += "\n\n## Exceções\n\n" + f"Exceção {name}. " * 100
        (folder / f"{name}.md").write_text(body, encoding="utf-8")
    return folder


class EmbeddingServer:
    """A local OpenAI-compatible embedding server whose failures the test scripts."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.requests: list[list[str]] = []
        self.fail_from = 0  # the 1-based request from which it answers 500 (0: never)
        self.stall_from = 0  # ... from which it waits for `released` (0: never)
        self.released = threading.Event()
        self.stalled = threading.Event()
        self._embedder = HashingEmbedder(dim=384)
        server.expect_request("/v1/embeddings", method="POST").respond_with_handler(self._handle)

    def _handle(self, request: Request) -> Response:
        texts = json.loads(request.get_data())["input"]
        self.requests.append(texts)
        number = len(self.requests)
        if self.stall_from and number >= self.stall_from:
            self.stalled.set()
            self.released.wait(WAIT_S)
        if self.fail_from and number >= self.fail_from:
            return Response(json.dumps({"error": "model crashed"}), status=500)
        vectors = self._embedder.embed_passages(texts)
        data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
        return Response(json.dumps({"data": data}), mimetype="application/json")

    def embedded(self) -> list[str]:
        return [text for batch in self.requests for text in batch]


@pytest.fixture
def embedding_server() -> Iterator[EmbeddingServer]:
    server = HTTPServer(threaded=True)
    server.start()
    fake = EmbeddingServer(server)
    yield fake
    fake.released.set()
    server.clear()
    server.stop()


@pytest.fixture
def remote_embedder(settings: Any, embedding_server: EmbeddingServer) -> Iterator[dict[str, str]]:
    """The app set to embed through the local server, three passages per request."""
    values = {
        "CHATRAG_EMBEDDER": "retrieval.embeddings.OpenAIEmbedder",
        "CHATRAG_EMBEDDING_URL": embedding_server.server.url_for("/v1"),
        "CHATRAG_EMBEDDING_MODEL": "e5-remote",
        "CHATRAG_EMBEDDING_BATCH": "3",
        "CHATRAG_EMBEDDING_TIMEOUT": "5",
    }
    settings.CHATRAG_EMBEDDER = values["CHATRAG_EMBEDDER"]
    settings.CHATRAG_EMBEDDING_URL = values["CHATRAG_EMBEDDING_URL"]
    settings.CHATRAG_EMBEDDING_MODEL = values["CHATRAG_EMBEDDING_MODEL"]
    settings.CHATRAG_EMBEDDING_BATCH = 3
    settings.CHATRAG_EMBEDDING_TIMEOUT = 5.0
    _load.cache_clear()
    yield values
    _load.cache_clear()


def _documents() -> dict[str, list[int]]:
    """Each stored document with the positions of its passages (all have vectors)."""
    assert not Chunk.objects.filter(embedding__isnull=True).exists()
    return {
        d.external_id: list(d.chunks.order_by("position").values_list("position", flat=True))
        for d in Document.objects.order_by("external_id")
    }


def _run(kb: Path) -> IngestionJob:
    job = IngestionJob.objects.create(collection=default_collection(), paths=[str(kb)])
    return ingestion_job_run(job_id=str(job.id))


@pytest.mark.django_db
def test_embedding_server_failing_mid_job_fails_it_cleanly_and_a_rerun_completes(
    tmp_path: Path, embedding_server: EmbeddingServer, remote_embedder: dict[str, str]
) -> None:
    kb = _write_kb(tmp_path / "kb")
    embedding_server.fail_from = 2  # the first batch (a, b) goes through, then HTTP 500

    job = _run(kb)
    assert job.status == IngestionJob.Status.FAILED
    assert job.report["error"] == (
        "the embedding server failed (embedding server answered HTTP 500): 3 document(s) "
        "not ingested, the others are complete; run the job again once it is back"
    )
    assert job.report["added"] == 2
    failed = {e["document"]: e["error"] for e in job.report["errors"]}
    assert failed == {
        "c": "embedding server answered HTTP 500",
        "d": "embedding server answered HTTP 500",
        "e": "not ingested: the embedder failed (embedding server answered HTTP 500)",
    }
    assert len(embedding_server.requests) == 2  # it stopped asking once the server failed
    assert _documents() == {"a": [0, 1], "b": [0, 1]}  # whole documents, nothing else

    embedding_server.fail_from = 0  # the server is back
    before = len(embedding_server.embedded())
    again = _run(kb)
    assert again.status == IngestionJob.Status.DONE
    assert (again.report["added"], again.report["unchanged"], again.report["errors"]) == (
        3,
        2,
        [],
    )
    assert _documents() == {name: [0, 1] for name in NAMES}
    # Only the missing documents were embedded again.
    redone = embedding_server.embedded()[before:]
    assert len(redone) == 6 and not any("Regra a." in t or "Regra b." in t for t in redone)


@pytest.mark.django_db
def test_embedding_server_refusing_connections_fails_the_job_and_writes_nothing(
    tmp_path: Path, settings: Any, remote_embedder: dict[str, str]
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.CHATRAG_EMBEDDING_URL = f"http://127.0.0.1:{port}/v1"  # nothing listens
    _load.cache_clear()
    job = _run(_write_kb(tmp_path / "kb"))
    assert job.status == IngestionJob.Status.FAILED
    assert job.report["error"].startswith(
        "the embedding server failed (embedding server unreachable: "
    )
    assert job.report["added"] == 0 and len(job.report["errors"]) == len(NAMES)
    assert _documents() == {}


# --- the worker dying -------------------------------------------------------------------------


def _wait(condition: Any, what: str, worker: subprocess.Popen[bytes] | None, log: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        text = log.read_text(errors="replace") if log.exists() else ""
        if worker is not None:
            assert worker.poll() is None, f"the worker exited early:\n{text[-3000:]}"
        assert time.monotonic() < deadline, f"never happened: {what}\n{text[-3000:]}"
        time.sleep(0.2)


def _status(job_id: Any) -> str:
    return str(IngestionJob.objects.get(pk=job_id).status)


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for worker in started:
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker_killed_mid_job_is_swept_on_restart_and_the_job_completes(
    tmp_path: Path,
    embedding_server: EmbeddingServer,
    remote_embedder: dict[str, str],
    workers: list[subprocess.Popen[bytes]],
) -> None:
    kb = _write_kb(tmp_path / "kb")
    env = worker_env(tmp_path, remote_embedder)
    job = IngestionJob.objects.create(collection=default_collection(), paths=[str(kb)])
    embedding_server.stall_from = 2  # the second batch hangs: the job is mid-way

    first_log = tmp_path / "worker-1.log"
    first = start_celery_worker(env, first_log, tmp_path)
    workers.append(first)
    celery_call(env, tmp_path, "retrieval.ingest_job", str(job.id))
    _wait(embedding_server.stalled.is_set, "the second batch", first, first_log)
    assert _status(job.id) == IngestionJob.Status.RUNNING
    assert _documents() == {"a": [0, 1], "b": [0, 1]}

    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=WAIT_S)
    embedding_server.stall_from = 0
    embedding_server.released.set()
    time.sleep(0.5)  # the dead worker's request has drained; nothing writes any more
    assert _status(job.id) == IngestionJob.Status.RUNNING  # nobody is left to say otherwise
    assert _documents() == {"a": [0, 1], "b": [0, 1]}  # complete documents or none

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
    assert job.finished_at is not None

    _wait(
        lambda: _status(retry_id) in {IngestionJob.Status.DONE, IngestionJob.Status.FAILED},
        "the retry",
        second,
        second_log,
    )
    retry = IngestionJob.objects.get(pk=retry_id)
    assert retry.status == IngestionJob.Status.DONE, retry.report
    assert (retry.report["retry_of"], retry.report["attempt"]) == (str(job.id), 2)
    assert (retry.report["added"], retry.report["unchanged"]) == (3, 2)
    assert _documents() == {name: [0, 1] for name in NAMES}


@pytest.mark.django_db
def test_next_ingest_sweeps_jobs_whose_worker_went_silent(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from retrieval.ingestion.jobs import MAX_ATTEMPTS, STALE_AFTER, ingestion_job_create

    def running(heartbeat: Any, **report: Any) -> IngestionJob:
        worker = {"host": "another-host", "pid": 1, "heartbeat": heartbeat.isoformat()}
        return IngestionJob.objects.create(
            collection=default_collection(),
            paths=[str(tmp_path)],
            status=IngestionJob.Status.RUNNING,
            report={**report, "worker": worker},
        )

    now = timezone.now()
    alive = running(now - timedelta(seconds=30))  # another host, heard from recently
    silent = running(now - STALE_AFTER - timedelta(minutes=1))
    exhausted = running(now - STALE_AFTER - timedelta(minutes=1), attempt=MAX_ATTEMPTS)

    with django_capture_on_commit_callbacks() as callbacks:
        ingestion_job_create(collection=default_collection(), paths=[tmp_path])
    assert len(callbacks) == 2  # the retry of `silent`, then the new job

    alive.refresh_from_db()
    silent.refresh_from_db()
    exhausted.refresh_from_db()
    assert alive.status == IngestionJob.Status.RUNNING
    assert silent.status == IngestionJob.Status.FAILED
    retry = IngestionJob.objects.get(pk=silent.report["retried_as"])
    assert retry.status == IngestionJob.Status.QUEUED
    assert retry.report == {"retry_of": str(silent.id), "attempt": 2}
    assert silent.report["error"].startswith("the worker stopped during this job (no progress")
    assert exhausted.status == IngestionJob.Status.FAILED
    assert exhausted.report["error"].endswith(f"not queued again after {MAX_ATTEMPTS} attempts")
    assert "retried_as" not in exhausted.report


@pytest.mark.django_db
def test_a_job_killed_twice_is_failed_for_good(tmp_path: Path) -> None:
    """Issue 38: after a restart the 1.5 GB upload was queued again by itself (attempt 2), and
    would have been a third time; a job whose worker stopped twice is not queued again."""
    from datetime import timedelta

    from django.utils import timezone

    from retrieval.ingestion.jobs import STALE_AFTER, ingestion_jobs_sweep_stale

    heartbeat = (timezone.now() - STALE_AFTER - timedelta(minutes=1)).isoformat()
    second = IngestionJob.objects.create(
        collection=default_collection(),
        paths=[str(tmp_path)],
        status=IngestionJob.Status.RUNNING,
        report={
            "retry_of": "first",
            "attempt": 2,
            "worker": {"host": "another-host", "pid": 1, "heartbeat": heartbeat},
        },
    )
    assert ingestion_jobs_sweep_stale() == []
    second.refresh_from_db()
    assert second.status == IngestionJob.Status.FAILED
    assert second.report["error"].endswith("not queued again after 2 attempts")
    assert IngestionJob.objects.count() == 1
