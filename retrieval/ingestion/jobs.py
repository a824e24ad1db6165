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
  marked FAILED and queued again as a new job, up to MAX_ATTEMPTS (two) in all, unless it died
  while reading a file (the heartbeat names the file being read): that job failed on its own
  input, and running it again would only kill the next worker, so it is not queued again.
  (Parsing runs in a child process with a time and memory limit, so this is the last line.)
- A job of more files than CHATRAG_INGEST_PART_FILES is split into parts, one Celery task
  each, that any number of workers run side by side. The job keeps one status, one progress
  and one report (the parts' added up); each running part has its own worker and heartbeat,
  and the sweep judges each: one dead part fails the whole job and queues it again (or not,
  when it died reading a file) exactly as above, and the job's other parts stop.
- Each task (a job, or a part) has Celery's time limits (CHATRAG_INGEST_JOB_SECONDS, soft;
  CHATRAG_INGEST_JOB_HARD_SECONDS, hard). Past the soft one the task stops itself and fails
  its job with that reason; a task that cannot be interrupted (stuck in C code) is killed at
  the hard one, and the worker's main process fails its job. Neither is queued again: the
  same job would only run out of time again.
- A pool process killed mid-job (out of memory, a signal) is judged by the worker's main
  process at once, as the sweep would (queued again up to MAX_ATTEMPTS), not only when a
  worker next starts or a job is next queued (`ingestion_job_lost`).
- The broker never delivers a job's task again by itself: a killed or timed-out task's
  message is acknowledged (`reject_on_worker_lost=False`, `acks_on_timeout=True`), and the
  job's own record decides whether it runs again.
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

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from retrieval.access import documents_readable
from retrieval.embeddings import get_embedder
from retrieval.models import Collection, Document, IngestionJob

from .parsers import ParseError
from .services import (
    FileOutcome,
    IngestReport,
    SourceDocument,
    documents_ingest,
    iter_files,
    source_from_file,
    sources_from_files,
    vocabulary_rebuild,
)

logger = logging.getLogger(__name__)
STALE_AFTER = timedelta(minutes=15)
# Two: a job whose worker was killed twice (an upload that exhausts memory after its parse,
# say) is marked failed for good; a third try only takes down a third worker (issue 38).
MAX_ATTEMPTS = 2
# Carried from a job to the one that retries it.
_RETRY_KEYS = ("retry_of", "attempt")


def _enqueue(job_id: str) -> None:
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


def _final(carried: dict[str, Any], report: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The job's status and report from its (merged) ingestion report."""
    report = {**carried, **report}
    embedder_error = report.get("embedder_error")
    if report.get("error"):
        return IngestionJob.Status.FAILED, report
    if embedder_error:
        missing = len(report.get("errors", []))
        report["error"] = (
            f"the embedding server failed ({embedder_error}): {missing} document(s) "
            "not ingested, the others are complete; run the job again once it is back"
        )
        return IngestionJob.Status.FAILED, report
    return IngestionJob.Status.DONE, report


def _failure(exc: BaseException) -> str:
    """Why a task failed, as its job's report says it."""
    if isinstance(exc, SoftTimeLimitExceeded):
        return (
            f"the job ran past its time limit ({settings.CHATRAG_INGEST_JOB_SECONDS:g} s, "
            "CHATRAG_INGEST_JOB_SECONDS) and was stopped; not queued again: the documents "
            "stored before are complete; split the upload, or raise the limit"
        )
    return f"{exc.__class__.__name__}: {exc}"[:1000]


def ingestion_job_run(*, job_id: str) -> IngestionJob:
    """Parse, embed and store the job's files; a failing file is reported, not fatal.

    More files than CHATRAG_INGEST_PART_FILES: the job is split into parts that any worker
    runs (`ingestion_job_part_run`), and the part that finishes last finishes the job.
    """
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
            files, listed = iter_files([Path(p) for p in job.paths])
            if len(files) > settings.CHATRAG_INGEST_PART_FILES:
                _job_split(job, carried, files, listed)
                job.refresh_from_db()
                return job

            def reading(path: Path) -> None:
                worker = {**_worker(timezone.now()), "reading": str(path)}
                IngestionJob.objects.filter(pk=job.pk).update(report={**carried, "worker": worker})

            items = _uploaded(job, [*listed, *sources_from_files(files, on_file=reading)])
            total = len(items)
        items = _with_groups(job, items)
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
        job.status, job.report = _final(carried, report.as_dict())
    except Exception as exc:  # the job records why it failed; the worker keeps running
        logger.exception("ingestion job %s failed", job.pk)
        job.refresh_from_db()
        job.report = {**carried, "error": _failure(exc)}
        job.status = IngestionJob.Status.FAILED
    job.finished_at = timezone.now()
    job.save(update_fields=["report", "status", "finished_at"])
    return job


def _with_groups(
    job: IngestionJob, items: list[SourceDocument | FileOutcome]
) -> list[SourceDocument | FileOutcome]:
    """An upload's groups replace the files' own."""
    if not job.groups:
        return items
    groups = tuple(job.groups)
    return [replace(i, groups=groups) if isinstance(i, SourceDocument) else i for i in items]


NOT_YOURS = (
    "a document you may not read has this id; not replaced (choose another folder or file name)"
)


def _uploaded(
    job: IngestionJob, items: list[SourceDocument | FileOutcome]
) -> list[SourceDocument | FileOutcome]:
    """A file whose id names a document its uploader may not read is refused, not ingested.

    The id is `folder/name`, chosen by the uploader: staff outside a group who uploaded
    `pt/faixas-salariais-2026.md` replaced the group's salary table (its text gone, the page
    public with theirs). The refusal says the id is taken, which ids being unique cannot
    avoid; nothing of the document's title, text or groups. Jobs the app queues itself
    (no staff member behind them: the benchmarks, the tests) are not limited.
    """
    uploader = job.created_by
    if uploader is None:
        return items
    ids = [i.external_id for i in items if isinstance(i, SourceDocument)]
    existing = Document.objects.filter(collection=job.collection, external_id__in=ids)
    hidden = set(
        existing.exclude(pk__in=documents_readable(user=uploader)).values_list(
            "external_id", flat=True
        )
    )
    return [
        FileOutcome(i.external_id, "error", error=NOT_YOURS)
        if isinstance(i, SourceDocument) and i.external_id in hidden
        else i
        for i in items
    ]


# --- A job split into parts -------------------------------------------------------------------
#
# - The job row stays the one record: `report["parts"]` holds each part's status, worker and
#   heartbeat (and, once finished, its report); `done`/`total` add the parts up. Every change
#   locks the job row, so two parts never overwrite each other's entry.
# - A part's files travel in its task message, not on the row (a big job's row stays small).
# - A part that finds its job no longer running (swept while it ran) stops at its next
#   progress step; what it wrote is complete documents, and the retry redoes the rest.


class _JobStopped(Exception):
    """The job was failed by the stale-job sweep while this part ran."""


def _job_split(
    job: IngestionJob,
    carried: dict[str, Any],
    files: list[tuple[Path, Path]],
    listed: list[FileOutcome],
) -> None:
    """Record the job's parts and enqueue one task per part once that is committed."""
    size = settings.CHATRAG_INGEST_PART_FILES
    chunks = [files[i : i + size] for i in range(0, len(files), size)]
    now = timezone.now()
    report = {
        **carried,
        "worker": _worker(now),
        "started": now.isoformat(),
        "listed": IngestReport(outcomes=listed).as_dict()["errors"],
        "parts": [{"status": "queued", "files": len(c), "done": 0} for c in chunks],
    }
    with transaction.atomic():
        IngestionJob.objects.filter(pk=job.pk).update(
            total=len(files) + len(listed), done=len(listed), report=report
        )
        for index, chunk in enumerate(chunks):
            pairs = [[str(path), str(root)] for path, root in chunk]
            transaction.on_commit(partial(_enqueue_part, str(job.id), index, pairs))
    logger.info("ingestion job %s: %d files in %d parts", job.pk, len(files), len(chunks))


def _enqueue_part(job_id: str, index: int, files: list[list[str]]) -> None:
    ingest_job_part.delay(job_id, index, files)


def _part_update(job_id: str, index: int, **changes: Any) -> IngestionJob:
    """Change one part's entry (and the job's progress) under the job's row lock."""
    with transaction.atomic():
        job = IngestionJob.objects.select_for_update().get(pk=job_id)
        if job.status != IngestionJob.Status.RUNNING:
            raise _JobStopped(str(job.status))
        parts = job.report["parts"]
        parts[index] = {**parts[index], **changes}
        job.done = len(job.report.get("listed", [])) + sum(int(p["done"]) for p in parts)
        job.report["worker"] = _worker(timezone.now())  # the job's latest sign of life
        job.save(update_fields=["report", "done"])
        return job


def ingestion_job_part_run(*, job_id: str, index: int, files: Sequence[Sequence[str]]) -> None:
    """Ingest one part of a split job; the part that finishes last finishes the job."""
    job = IngestionJob.objects.select_related("collection").get(pk=job_id)
    parts = job.report.get("parts") if isinstance(job.report, dict) else None
    if job.status != IngestionJob.Status.RUNNING or not parts or index >= len(parts):
        logger.warning("ingestion job %s is %s: part %s not run", job.pk, job.status, index)
        return
    try:
        with transaction.atomic():
            locked = IngestionJob.objects.select_for_update().get(pk=job_id)
            part = locked.report["parts"][index] if locked.report.get("parts") else {}
            if locked.status != IngestionJob.Status.RUNNING or part.get("status") != "queued":
                logger.warning(
                    "ingestion job %s part %s is not queued: not run again", job_id, index
                )
                return
            _part_update(job_id, index, status="running", worker=_worker(timezone.now()))
        outcome: dict[str, Any]
        try:

            def reading(path: Path) -> None:
                worker = {**_worker(timezone.now()), "reading": str(path)}
                _part_update(job_id, index, worker=worker)

            pairs = [(Path(path), Path(root)) for path, root in files]
            items = _with_groups(job, _uploaded(job, sources_from_files(pairs, on_file=reading)))
            _part_update(job_id, index, worker=_worker(timezone.now()))

            def progress(done: int, total: int, name: str) -> None:
                _part_update(job_id, index, done=done, worker=_worker(timezone.now()))

            report = documents_ingest(
                collection=job.collection,
                sources=items,
                embedder=get_embedder(),
                total=len(items),
                progress=progress,
                rebuild_vocabulary=False,
            )
            outcome = {"status": "done", "report": report.as_dict()}
        except _JobStopped:
            raise
        except Exception as exc:  # recorded on the job; the other parts go on
            logger.exception("ingestion job %s part %s failed", job_id, index)
            outcome = {"status": "failed", "error": _failure(exc)}
        _part_finish(job_id, index, outcome, files=len(files))
    except _JobStopped as stopped:
        logger.warning("ingestion job %s is %s: part %s stopped", job_id, stopped, index)


def _part_finish(job_id: str, index: int, outcome: dict[str, Any], *, files: int) -> None:
    """Record a finished part; the last one merges the reports and finishes the job."""
    with transaction.atomic():
        job = _part_update(job_id, index, **outcome, done=files)
        parts = job.report["parts"]
        if any(p["status"] not in {"done", "failed"} for p in parts):
            return
        carried = {k: job.report[k] for k in _RETRY_KEYS if k in job.report}
        merged = _reports_merge(
            [p.get("report", {}) for p in parts],
            listed=job.report.get("listed", []),
            errors=[f"part {i + 1}: {p['error']}" for i, p in enumerate(parts) if p.get("error")],
        )
        started = parse_datetime(str(job.report.get("started") or ""))
        now = timezone.now()
        if started is not None:
            merged["seconds"] = round((now - started).total_seconds(), 2)
        merged["parts"] = len(parts)
        ran = {
            f"{w.get('host')}:{w.get('pid')}"
            for p in parts
            if isinstance(w := p.get("worker"), dict)
        }
        merged["workers"] = sorted(ran)
        if any(merged[k] for k in ("added", "updated", "removed")):
            vocabulary_rebuild(collection=job.collection)
        job.status, job.report = _final(carried, merged)
        job.finished_at = now
        job.save(update_fields=["report", "status", "finished_at"])


def _reports_merge(
    reports: Sequence[dict[str, Any]], *, listed: Sequence[Any], errors: Sequence[str]
) -> dict[str, Any]:
    """Add the parts' reports up into one, shaped like a single run's."""
    merged: dict[str, Any] = {
        key: sum(int(r.get(key, 0)) for r in reports)
        for key in ("added", "updated", "unchanged", "removed", "chunks_embedded", "lines_embedded")
    }
    merged["errors"] = [*listed, *(e for r in reports for e in r.get("errors", []))]
    merged["seconds"] = round(max((float(r.get("seconds", 0)) for r in reports), default=0.0), 2)
    # The engine's time, all parts together (the parts may have run side by side).
    merged["embed_seconds"] = round(sum(float(r.get("embed_seconds", 0)) for r in reports), 2)
    embedder_errors = [r["embedder_error"] for r in reports if r.get("embedder_error")]
    if embedder_errors:
        merged["embedder_error"] = embedder_errors[0]
    if errors:
        merged["error"] = "; ".join(errors)[:1000]
    return merged


# --- The stale-job sweep ----------------------------------------------------------------------


def _stale_reason(worker: object, now: datetime) -> str | None:
    """Why the worker this record names is taken for dead, or None while it may be alive."""
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


def _job_stale(job: IngestionJob, now: datetime) -> tuple[str, str | None] | None:
    """(why, the file being read) when the job's worker, or a running part's, is dead.

    A split job whose parts are all waiting for a worker is not stale, like a queued job.
    """
    for worker in _running_workers(job):
        reason = _stale_reason(worker, now)
        if reason is not None:
            reading = worker.get("reading") if isinstance(worker, dict) else None
            return reason, str(reading) if reading else None
    return None


def ingestion_jobs_sweep_stale(*, now: datetime | None = None) -> list[IngestionJob]:
    """Fail the running jobs whose worker died and queue each again; return the new jobs."""
    now = now or timezone.now()
    retries: list[IngestionJob] = []
    for job in IngestionJob.objects.filter(status=IngestionJob.Status.RUNNING):
        stale = _job_stale(job, now)
        if stale is None:
            continue
        reason, reading = stale
        retry = _job_fail_stopped(job, reason=reason, reading=reading, now=now)
        if retry is not None:
            retries.append(retry)
    return retries


def ingestion_job_lost(*, job_id: str, exception: BaseException) -> IngestionJob | None:
    """Fail a running job whose task the worker lost: killed at its hard time limit (not
    queued again), or its pool process died (queued again as the sweep would); return the
    retry, if any. Called by the worker's main process (`retrieval.tasks`)."""
    from celery.exceptions import TimeLimitExceeded

    job = IngestionJob.objects.filter(pk=job_id, status=IngestionJob.Status.RUNNING).first()
    if job is None:  # finished, or judged already
        return None
    now = timezone.now()
    if isinstance(exception, TimeLimitExceeded):
        error = (
            f"the job ran past its hard time limit "
            f"({settings.CHATRAG_INGEST_JOB_HARD_SECONDS:g} s, CHATRAG_INGEST_JOB_HARD_SECONDS) "
            "and its process was killed; not queued again: split the upload, or raise the limit"
        )
        return _job_fail_stopped(job, reason="", reading=None, now=now, error=error)
    reading = _job_reading(job)
    # billiard's text ends with its own job index ("... (SIGKILL) Job: 0."): not ours.
    reason = f"its process was lost: {str(exception).split(' Job:')[0].rstrip('.')}"
    return _job_fail_stopped(job, reason=reason, reading=reading, now=now)


def _running_workers(job: IngestionJob) -> list[Any]:
    """The worker records of a running job: its own, or those of its running parts."""
    report = job.report if isinstance(job.report, dict) else {}
    parts = report.get("parts")
    if isinstance(parts, list):
        return [p.get("worker") for p in parts if p.get("status") == "running"]
    return [report.get("worker")]


def _job_reading(job: IngestionJob) -> str | None:
    """The file a running job (or one of its running parts) was reading, if any."""
    for worker in _running_workers(job):
        if isinstance(worker, dict) and worker.get("reading"):
            return str(worker["reading"])
    return None


def _job_fail_stopped(
    job: IngestionJob, *, reason: str, reading: str | None, now: datetime, error: str = ""
) -> IngestionJob | None:
    """Mark a running job whose worker stopped as failed, with why and what happens next;
    queue it again as a new job (returned) below MAX_ATTEMPTS, unless it died reading a file
    or `error` (a final reason of its own) is given."""
    attempt = int(job.report.get("attempt", 1))
    with transaction.atomic():
        report = {k: v for k, v in job.report.items() if k != "worker"}
        retry = None
        if error:
            then = ""
        elif reading:
            name = Path(reading).name
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
        report["error"] = error or f"the worker stopped during this job ({reason}); {then}"
        marked = IngestionJob.objects.filter(pk=job.pk, status=IngestionJob.Status.RUNNING).update(
            status=IngestionJob.Status.FAILED, report=report, finished_at=now
        )
        if not marked:  # finished or judged meanwhile
            transaction.set_rollback(True)
            return None
        logger.warning("ingestion job %s: %s", job.pk, report["error"])
        if retry is not None:
            transaction.on_commit(partial(_enqueue, str(retry.id)))
    return retry


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
        except SoftTimeLimitExceeded:  # the task's time is up, not this file's fault
            raise
        except Exception as exc:  # a parser choking on one file must not stop the rest
            error = f"unreadable ({exc.__class__.__name__})"
            items.append(FileOutcome(document.external_id, "error", error=error))
            continue
        groups = tuple(sorted(g.name for g in document.groups.all()))
        items.append(replace(source, external_id=document.external_id, groups=groups))
    return items


# The Celery tasks live beside the jobs they queue and run, so that queueing one imports
# nothing back (`retrieval.tasks` imports this module for the worker: no import circle).
# Celery's limits, read when the worker imports this module (None: no limit); a killed or
# timed-out task's message is acknowledged, never delivered again by the broker.
_TASK_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "acks_on_timeout": True,
    "reject_on_worker_lost": False,
    "soft_time_limit": settings.CHATRAG_INGEST_JOB_SECONDS or None,
    "time_limit": settings.CHATRAG_INGEST_JOB_HARD_SECONDS or None,
}
INGEST_TASKS = ("retrieval.ingest_job", "retrieval.ingest_job_part")


@shared_task(name="retrieval.ingest_job", **_TASK_OPTIONS)
def ingest_job(job_id: str) -> None:
    """Run an ingestion job (uploaded files or server paths), recording progress on the job."""
    ingestion_job_run(job_id=job_id)


@shared_task(name="retrieval.ingest_job_part", **_TASK_OPTIONS)
def ingest_job_part(job_id: str, index: int, files: list[list[str]]) -> None:
    """Run one part of a split ingestion job: these (file, root) pairs."""
    ingestion_job_part_run(job_id=job_id, index=index, files=files)
