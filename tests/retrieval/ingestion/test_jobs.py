"""The ingestion job as the worker runs it: progress recorded, errors reported per file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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


def test_a_file_past_the_parse_time_limit_is_refused_and_the_job_not_queued_again(
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """CHATRAG_PARSE_SECONDS is the limit a job's parse runs under: a file that takes longer
    is refused with the limit in its error, the job's other files are stored, and nothing is
    queued again (a refused file is an outcome, not a worker failure)."""
    from retrieval.ingestion import parsers
    from retrieval.ingestion.jobs import ingestion_jobs_sweep_stale

    settings.CHATRAG_PARSE_SECONDS = 0.5
    original = parsers.parse_markdown

    def stuck_on_marker(text: str, fallback: str) -> Any:
        if "STUCK" in text:
            time.sleep(60)  # a parser that never finishes; the child is killed long before
        return original(text, fallback)

    monkeypatch.setattr(parsers, "parse_markdown", stuck_on_marker)  # the forked child's too
    (tmp_path / "slow.md").write_text("# STUCK\n\nNunca termina.", encoding="utf-8")
    (tmp_path / "ok.md").write_text("# Férias\n\nTrinta dias.", encoding="utf-8")
    job = IngestionJob.objects.create(collection=default_collection(), paths=[str(tmp_path)])
    with django_capture_on_commit_callbacks() as callbacks:
        done = ingestion_job_run(job_id=str(job.id))
        stale = ingestion_jobs_sweep_stale()
    assert done.status == IngestionJob.Status.DONE, done.report
    assert done.report["errors"] == [
        {"document": str(tmp_path / "slow.md"), "error": "took more than 0.5 s to read"}
    ]
    assert done.report["added"] == 1 and Document.objects.filter(external_id="ok").exists()
    assert stale == [] and callbacks == []
    assert list(IngestionJob.objects.values_list("pk", flat=True)) == [job.pk]
