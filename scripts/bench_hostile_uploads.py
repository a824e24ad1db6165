"""Measure what each hostile upload (`tests/hostile_uploads.py`) costs the ingestion worker.

Usage: python scripts/bench_hostile_uploads.py [--ingest] [--only NAME ...] [--seconds 10]
       [--json out.json]

Without `--ingest`, each file is read with `parse_file_isolated`, the worker's own call (a
forked child with the time and memory limits), and its outcome is printed with the wall time
and the child's CPU time. No database is needed.

With `--ingest`, each file goes the whole way in a fresh process of its own: an ingestion job
is recorded for it and run by `ingestion_job_run`, the worker's own function (parse in the
limited child, chunking, embedding with the configured embedder, the write), against the
database of the settings (migrated; the documents are removed afterwards). Printed per file:
the job's outcome, the worker's CPU seconds for the job (its own and its parse child's), and
the peak RSS of the worker process (model and Django included) and of the parse child. The
issue 38 targets: no upload under 1 MB above 30 s of worker CPU or 500 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from retrieval.ingestion.parsers import (  # noqa: E402 - after the path above
    DEFAULT_LIMITS,
    ParseError,
    parse_file_isolated,
)
from tests.hostile_uploads import HOSTILE_UPLOADS  # noqa: E402

COLLECTION = "bench-hostile-uploads"
CPU_TARGET_S = 30.0
RSS_TARGET_MB = 500.0


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _parse_only(seconds: float, only: set[str]) -> list[dict[str, Any]]:
    limits = replace(DEFAULT_LIMITS, seconds=seconds)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for upload in HOSTILE_UPLOADS:
            if only and upload.name not in only:
                continue
            path = Path(folder) / upload.name
            upload.write(path)
            cpu, start = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
            try:
                parsed = parse_file_isolated(path, max_bytes=20_000_000, limits=limits)
                outcome = f"parsed: {len(parsed.text):,} characters"
            except ParseError as exc:
                outcome = f"refused: {exc}"
            wall, cpu = time.perf_counter() - start, _cpu(resource.RUSAGE_CHILDREN) - cpu
            rows.append(
                {"file": upload.name, "bytes": path.stat().st_size, "wall_s": round(wall, 3)}
                | {"child_cpu_s": round(cpu, 3), "outcome": outcome}
            )
            print(
                f"{upload.name:26} {path.stat().st_size:>8} B  wall {wall:6.2f} s  "
                f"cpu {cpu:6.2f} s  {outcome[:80]}",
                flush=True,
            )
    return rows


def _ingest_one(name: str) -> dict[str, Any]:
    """In this (fresh) process: ingest one upload as the worker does; return its costs."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
    import django

    django.setup()
    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.jobs import ingestion_job_run
    from retrieval.ingestion.services import collection_get_or_create
    from retrieval.models import Document, IngestionJob

    upload = next(u for u in HOSTILE_UPLOADS if u.name == name)
    collection = collection_get_or_create(slug=COLLECTION, name="Hostile uploads (benchmark)")
    get_embedder()  # loaded before the clock starts, as in a worker that has run a job
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / upload.name
        upload.write(path)
        job = IngestionJob.objects.create(collection=collection, paths=[str(path)])
        self_cpu, child_cpu = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        job = ingestion_job_run(job_id=str(job.id))
        wall = time.perf_counter() - start
        self_cpu = _cpu(resource.RUSAGE_SELF) - self_cpu
        child_cpu = _cpu(resource.RUSAGE_CHILDREN) - child_cpu
        size = path.stat().st_size
    report = job.report
    errors = report.get("errors") or []
    outcome = (
        f"{job.status}: {errors[0]['error']}"
        if errors
        else f"{job.status}: {report.get('chunks_embedded', 0)} passages"
        + (f" ({report['error']})" if "error" in report else "")
    )
    Document.objects.filter(collection=collection).delete()
    return {
        "file": name,
        "bytes": size,
        "outcome": outcome[:120],
        "wall_s": round(wall, 2),
        "worker_cpu_s": round(self_cpu + child_cpu, 2),
        "parse_child_cpu_s": round(child_cpu, 2),
        # ru_maxrss is in KiB on Linux; the worker's includes the model and Django.
        "worker_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "parse_child_peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        ),
    }


def _ingest(only: set[str]) -> list[dict[str, Any]]:
    rows = []
    for upload in HOSTILE_UPLOADS:
        if only and upload.name not in only:
            continue
        done = subprocess.run(  # noqa: S603 - this script, with a name from the list above
            [sys.executable, __file__, "--one", upload.name],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            row: dict[str, Any] = {"file": upload.name, "outcome": f"crashed: {done.stderr[-300:]}"}
        else:
            row = json.loads(lines[-1])
            over = (
                row["worker_cpu_s"] > CPU_TARGET_S
                or max(row["worker_peak_rss_mb"], row["parse_child_peak_rss_mb"]) > RSS_TARGET_MB
            )
            row["over_target"] = over
        rows.append(row)
        print(
            f"{row['file']:26} {row.get('bytes', 0):>8} B  wall {row.get('wall_s', 0):7.2f} s  "
            f"cpu {row.get('worker_cpu_s', 0):6.2f} s "
            f"(parse {row.get('parse_child_cpu_s', 0):5.2f})"
            f"  rss {row.get('worker_peak_rss_mb', 0):4} MB (parse "
            f"{row.get('parse_child_peak_rss_mb', 0):4} MB)"
            f"{'  OVER TARGET' if row.get('over_target') else ''}  {row['outcome'][:70]}",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=DEFAULT_LIMITS.seconds)
    parser.add_argument("--ingest", action="store_true", help="the whole job, not the parse")
    parser.add_argument("--only", nargs="*", default=[], help="these files of the list")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the per-file child of --ingest
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_ingest_one(args.one)), flush=True)
        return
    only = set(args.only)
    rows = _ingest(only) if args.ingest else _parse_only(args.seconds, only)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
