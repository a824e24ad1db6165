"""The search benchmark still runs end to end (tiny size; no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Its own seed, so the collection never collides with a real run's (seed 7 by default).
SMOKE_SEED = "90210"
VARIANT_LABELS = [
    "ours: hybrid, 1 statement",
    "ours, earlier text leg (OR every word)",
    "azure: to_tsvector at query time",
    "two round trips, fused in Python",
    "3 queries parallel (search_many)",
    "3 queries sequential",
    "ours without indexes",
]


def test_benchmark_prints_every_variant(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # Same server as the tests: the script reads DATABASE_URL, else asks chatrag.devdb.
    proc = subprocess.run(
        [sys.executable, "scripts/bench_search.py", "--sizes", "300", "--queries", "5"]
        + ["--seed", SMOKE_SEED, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "variant" in proc.stdout and "p95 ms" in proc.stdout
    for label in VARIANT_LABELS:
        assert label in proc.stdout, label
    assert "plan of ours at 300 chunks" in proc.stdout and "Scan" in proc.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report["results"]["300"]["variants"]) == {
        "ours",
        "or_all",
        "azure",
        "two_trips",
        "parallel3",
        "sequential3",
        "no_index",
    }


def test_app_benchmark_prints_every_target(tmp_path: Path) -> None:
    """A turn, WebSocket frames, ingestion by a real worker and memory, on the tiny collection."""
    search = tmp_path / "search.json"
    app = tmp_path / "app.json"
    common = ["--seed", SMOKE_SEED]
    subprocess.run(
        [sys.executable, "scripts/bench_search.py", "--sizes", "300", "--queries", "3"]
        + common
        + ["--json", str(search)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=240,
    )
    proc = subprocess.run(
        [sys.executable, "scripts/bench_app.py", "--size", "300", "--turns", "3"]
        + ["--frames-seconds", "2", "--model-latency", "0.05", "--ingest-docs", "1"]
        + common
        + ["--search-json", str(search), "--json", str(app)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(app.read_text(encoding="utf-8"))
    names = {row["target"] for row in report["targets"]}
    assert {
        "turn without the model p95",
        "rewrite frame p95 (WebSocket)",
        "first token p95 - model latency",
        "ingestion / raw embedder throughput",
        "web process peak RSS",
        "worker peak RSS",
    } <= names
    assert report["app"]["turn"]["turn"]["n"] == 3
    assert report["app"]["frames"]["frames"]["delta"]["n"] >= 1
    assert not report["app"]["frames"]["failed"]
    assert report["app"]["ingestion"]["job_status"] == "done"
    assert report["app"]["ingestion"]["chunks_stored"] == report["app"]["ingestion"]["chunks"]
    assert "met" in proc.stdout
