"""The ingestion job as the worker runs it: progress recorded, errors reported per file."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.ingestion.jobs import ingestion_job_create, ingestion_job_run
from retrieval.models import Document, IngestionJob
from retrieval.services import default_collection

pytestmark = pytest.mark.django_db


def test_job_records_progress_and_per_file_errors(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Férias\n\nTrinta dias.", encoding="utf-8")
    (tmp_path / "b.pdf").write_bytes(b"%PDF-1.4 not really")
    job = IngestionJob.objects.create(collection=default_collection(), paths=[str(tmp_path)])
    done = ingestion_job_run(job_id=str(job.id))
    assert done.status == IngestionJob.Status.DONE
    assert (done.done, done.total) == (2, 2)
    assert done.report["added"] == 1
    assert [e["document"] for e in done.report["errors"]] == [str(tmp_path / "b.pdf")]
    assert Document.objects.filter(external_id="a").exists()


def test_job_is_enqueued_only_after_commit(
    tmp_path: Path, django_capture_on_commit_callbacks: object
) -> None:
    (tmp_path / "a.md").write_text("# Férias\n\nTrinta dias.", encoding="utf-8")
    with django_capture_on_commit_callbacks() as callbacks:  # type: ignore[operator]
        job = ingestion_job_create(collection=default_collection(), paths=[tmp_path])
    assert job.status == IngestionJob.Status.QUEUED and len(callbacks) == 1
