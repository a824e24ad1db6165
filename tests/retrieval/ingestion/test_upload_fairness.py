"""An upload whose file takes long does not hold another upload's job (issue 38, finding 1).

The Celery worker of `make run` (`chatrag.dev.server.worker_command`) on the filesystem broker
and the test database: the first upload's file is held at the embedding server; the second
upload, queued after it, is done while the first is still held; then the first is done too.
The order of events is asserted, never a duration (the waits are hang guards).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug import Request, Response

from chatrag.dev.server import worker_command
from retrieval.models import Document, IngestionJob
from retrieval.services import default_collection
from tests.retrieval.ingestion.test_job_faults import WAIT_S, EmbeddingServer, _status, _wait
from tests.support import celery_call, worker_env


class SlowFileStalls(EmbeddingServer):
    """A request with a passage of the slow file waits for `released`; the others answer."""

    def _handle(self, request: Request) -> Response:
        if b"lento" in request.get_data():
            self.stalled.set()
            self.released.wait(3 * WAIT_S)  # a hang guard, longer than every wait of the test
        return super()._handle(request)


@pytest.fixture
def dev_worker() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for worker in started:  # the worker and its pool's children: a process group each
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()


def _upload(folder: Path, name: str, word: str) -> IngestionJob:
    folder.mkdir(parents=True)
    body = f"# Política {name}\n\n## Regra\n\n" + f"Regra {word} {name}. " * 40
    (folder / f"{name}.md").write_text(body, encoding="utf-8")
    return IngestionJob.objects.create(collection=default_collection(), paths=[str(folder)])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_second_upload_is_done_while_the_first_uploads_file_is_held(
    tmp_path: Path,
    embedding_server: EmbeddingServer,
    remote_embedder: dict[str, str],
    dev_worker: list[subprocess.Popen[bytes]],
) -> None:
    embedding_server.server.clear()  # this test's server answers instead
    server = SlowFileStalls(embedding_server.server)
    # The held request must not time out meanwhile (that would fail the first job instead).
    env = worker_env(tmp_path, remote_embedder, CHATRAG_EMBEDDING_TIMEOUT=str(4 * WAIT_S))
    log = tmp_path / "worker.log"
    command = [*worker_command(processes=2, beat_schedule=None), "--logfile", str(log)]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    worker = subprocess.Popen(  # noqa: S603 - the dev server's own worker command
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    dev_worker.append(worker)

    first = _upload(tmp_path / "upload-1", "pesado", "lento")
    celery_call(env, tmp_path, "retrieval.ingest_job", str(first.id))
    _wait(server.stalled.is_set, "the first upload's file at the embedding server", worker, log)
    second = _upload(tmp_path / "upload-2", "leve", "rapido")
    celery_call(env, tmp_path, "retrieval.ingest_job", str(second.id))

    _wait(
        lambda: (
            _status(second.id) != IngestionJob.Status.RUNNING
            and _status(second.id) != IngestionJob.Status.QUEUED
        ),
        "the second upload's job, while the first is held",
        worker,
        log,
    )
    assert _status(second.id) == IngestionJob.Status.DONE
    assert _status(first.id) == IngestionJob.Status.RUNNING  # still held
    assert list(Document.objects.values_list("external_id", flat=True)) == ["leve"]

    server.released.set()
    _wait(lambda: _status(first.id) == IngestionJob.Status.DONE, "the first upload", worker, log)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.finished_at is not None and second.finished_at is not None
    assert second.finished_at < first.finished_at
    assert sorted(Document.objects.values_list("external_id", flat=True)) == ["leve", "pesado"]
