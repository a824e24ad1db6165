"""Ingestion jobs: the `ingest` service run in the worker, with progress stored on the job.

- A worker claims a job (queued → running) and records on it who it is and a heartbeat, in
  `report` until the final report replaces it. A job that is not queued any more (a message
  the broker delivered again) is left alone.
- The embedder failing ends the job FAILED with the reason; the documents written before it
  failed are complete (each is written in one transaction), and running the job again does
  only the rest.
- A worker killed mid-job (kill -9, out of memory, a host restart) cannot mark its job. The
  stale-job sweep does, when a worker starts and before a job is queued: a running job whose
  process is gone (same host, dead pid) or whose heartbeat is older than STALE_AFTER is
  marked FAILED and queued again as a new job, up to MAX_ATTEMPTS in all, unless it died
  while reading a file (the heartbeat names the file being read): that job failed on its own
  input, and running it again would only kill the next worker, so it is not queued again.
  (Parsing runs in a child process with a time and memory limit, so this is the last line.)
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from retrieval.embeddings import get_embedder
from retrieval.models import Collection, Document, IngestionJob

from .parsers import ParseError
from .services import (
    FileOutcome,
    SourceDocument,
    documents_ingest,
    source_from_file,
    sources_from_paths,
)

logger = logging.getLogger(__name__)
STALE_AFTER = timedelta(minutes=15)
MAX_ATTEMPTS = 3
# Carried from a job to the one that retries it.
_RETRY_KEYS = ("retry_of", "attempt")


def _enqueue(job_id: str) -> None:
    from retrieval.tasks import ingest_job

    ingest_job.delay(job_id)


def ingestion_job_create(
    *,
    collection: Collection,
    paths: list[Path],
    user: User | None = None,
    groups: Sequence[str] = (),
    document_ids: Sequence[int] = (),
) -> IngestionJob:
    """Record a job and enqueue it once the transaction commits (the worker must see it).

    `groups` overrides the files' own groups (an upload from the admin); `document_ids`
    makes it a re-index of those documents from their source files.
    """
    ingestion_jobs_sweep_stale()
    job = IngestionJob.objects.create(
        collection=collection,
        created_by=user if user is not None and user.is_authenticated else None,
        paths=[str(p) for p in paths],
        groups=list(groups),
        document_ids=list(document_ids),
    )
    transaction.on_commit(partial(_enqueue, str(job.id)))
    return job


def _worker(now: datetime) -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "heartbeat": now.isoformat()}


def ingestion_job_run(*, job_id: str) -> IngestionJob:
    """Parse, embed and store the job's files; a failing file is reported, not fatal."""
    job = IngestionJob.objects.select_related("collection").get(pk=job_id)
    carried = {k: job.report[k] for k in _RETRY_KEYS if k in job.report}
    claimed = IngestionJob.objects.filter(pk=job.pk, status=IngestionJob.Status.QUEUED).update(
        status=IngestionJob.Status.RUNNING, report={**carried, "worker": _worker(timezone.now())}
    )
    if not claimed:
        logger.warning("ingestion job %s is %s, not queued: not run again", job.pk, job.status)
        return job
    try:
        if job.document_ids:
            items = _reindex_sources(job.collection, job.document_ids)
            total = len(items)
        else:

            def reading(path: Path) -> None:
                worker = {**_worker(timezone.now()), "reading": str(path)}
                IngestionJob.objects.filter(pk=job.pk).update(report={**carried, "worker": worker})

            items, total = sources_from_paths([Path(p) for p in job.paths], on_file=reading)
        if job.groups:
            groups = tuple(job.groups)
            items = [
                replace(i, groups=groups) if isinstance(i, SourceDocument) else i for i in items
            ]
        IngestionJob.objects.filter(pk=job.pk).update(
            total=total, report={**carried, "worker": _worker(timezone.now())}
        )

        def progress(done: int, total: int, name: str) -> None:
            heartbeat = {**carried, "worker": _worker(timezone.now())}
            IngestionJob.objects.filter(pk=job.pk).update(done=done, total=total, report=heartbeat)

        report = documents_ingest(
            collection=job.collection,
            sources=items,
            embedder=get_embedder(),
            total=total,
            progress=progress,
        )
        job.refresh_from_db()
        job.report = {**carried, **report.as_dict()}
        job.status = IngestionJob.Status.DONE
        if report.embedder_error:
            missing = len(report.errors)
            job.report["error"] = (
                f"the embedding server failed ({report.embedder_error}): {missing} document(s) "
                "not ingested, the others are complete; run the job again once it is back"
            )
            job.status = IngestionJob.Status.FAILED
    except Exception as exc:  # the job records why it failed; the worker keeps running
        logger.exception("ingestion job %s failed", job.pk)
        job.refresh_from_db()
        job.report = {**carried, "error": f"{exc.__class__.__name__}: {exc}"[:1000]}
        job.status = IngestionJob.Status.FAILED
    job.finished_at = timezone.now()
    job.save(update_fields=["report", "status", "finished_at"])
    return job


def _stale_reason(job: IngestionJob, now: datetime) -> str | None:
    """Why this running job's worker is taken for dead, or None while it may be alive."""
    worker = job.report.get("worker") if isinstance(job.report, dict) else None
    worker = worker if isinstance(worker, dict) else {}
    pid = worker.get("pid")
    if worker.get("host") == socket.gethostname() and isinstance(pid, int) and pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"its worker process {pid} is gone"
        except PermissionError:
            pass  # some other user's process has that pid now: judge by the heartbeat
    heartbeat = parse_datetime(str(worker.get("heartbeat") or ""))
    if heartbeat is None or now - heartbeat > STALE_AFTER:
        return f"no progress for more than {int(STALE_AFTER.total_seconds() // 60)} minutes"
    return None


def ingestion_jobs_sweep_stale(*, now: datetime | None = None) -> list[IngestionJob]:
    """Fail the running jobs whose worker died and queue each again; return the new jobs."""
    now = now or timezone.now()
    retries: list[IngestionJob] = []
    for job in IngestionJob.objects.filter(status=IngestionJob.Status.RUNNING):
        reason = _stale_reason(job, now)
        if reason is None:
            continue
        attempt = int(job.report.get("attempt", 1))
        worker = job.report.get("worker")
        reading = worker.get("reading") if isinstance(worker, dict) else None
        with transaction.atomic():
            report = {k: v for k, v in job.report.items() if k != "worker"}
            retry = None
            if reading:
                name = Path(str(reading)).name
                then = f"it was reading {name}, which is likely the cause: not queued again"
                report["failed_on"] = name
            elif attempt < MAX_ATTEMPTS:
                retry = IngestionJob.objects.create(
                    collection_id=job.collection_id,
                    created_by_id=job.created_by_id,
                    paths=job.paths,
                    groups=job.groups,
                    document_ids=job.document_ids,
                    report={"retry_of": str(job.id), "attempt": attempt + 1},
                )
                report["retried_as"] = str(retry.id)
                then = f"queued again as job {retry.id}"
            else:
                then = f"not queued again after {attempt} attempts"
            report["error"] = f"the worker stopped during this job ({reason}); {then}"
            marked = IngestionJob.objects.filter(
                pk=job.pk, status=IngestionJob.Status.RUNNING
            ).update(status=IngestionJob.Status.FAILED, report=report, finished_at=now)
            if not marked:  # finished or swept meanwhile
                transaction.set_rollback(True)
                continue
            logger.warning("ingestion job %s: %s", job.pk, report["error"])
            if retry is not None:
                transaction.on_commit(partial(_enqueue, str(retry.id)))
                retries.append(retry)
    return retries


def _reindex_sources(
    collection: Collection, document_ids: Sequence[int]
) -> list[SourceDocument | FileOutcome]:
    """Read documents again from their files, keeping their ids and current groups.

    Their checksums are cleared first, so they are re-chunked and re-embedded even when
    nothing changed (a new chunking setting or embedding model, a suspected bad index).
    """
    documents = list(
        Document.objects.filter(collection=collection, pk__in=document_ids).prefetch_related(
            "groups"
        )
    )
    Document.objects.filter(pk__in=[d.pk for d in documents]).update(checksum="")
    items: list[SourceDocument | FileOutcome] = []
    for document in documents:
        path = Path(document.source_path) if document.source_path else None
        if path is None or not path.is_file():
            items.append(FileOutcome(document.external_id, "error", error="source file not found"))
            continue
        try:
            source = source_from_file(path, root=path.parent)
        except ParseError as exc:
            items.append(FileOutcome(document.external_id, "error", error=str(exc)))
            continue
        except Exception as exc:  # a parser choking on one file must not stop the rest
            error = f"unreadable ({exc.__class__.__name__})"
            items.append(FileOutcome(document.external_id, "error", error=error))
            continue
        groups = tuple(sorted(g.name for g in document.groups.all()))
        items.append(replace(source, external_id=document.external_id, groups=groups))
    return items
