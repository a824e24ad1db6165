"""Time the parse of each hostile upload (`tests/hostile_uploads.py`) as the worker runs it.

Usage: python scripts/bench_hostile_uploads.py [--seconds 10] [--json out.json]

Each file is written to a temporary folder and read with `parse_file_isolated`, the worker's
own call (a forked child with the time and memory limits), and its outcome is printed with
the wall time, and the CPU time of the child (from the kernel's accounting of waited-for
children). This is the parse only: the end-to-end test
(`tests/retrieval/ingestion/test_hostile_uploads.py`, run with `-s`) prints the whole task's
time from the worker's log, embedding included. No database is needed.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from retrieval.ingestion.parsers import (  # noqa: E402 - after the path above
    DEFAULT_LIMITS,
    ParseError,
    parse_file_isolated,
)
from tests.hostile_uploads import HOSTILE_UPLOADS  # noqa: E402


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=DEFAULT_LIMITS.seconds)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    limits = replace(DEFAULT_LIMITS, seconds=args.seconds)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for upload in HOSTILE_UPLOADS:
            path = Path(folder) / upload.name
            upload.write(path)
            cpu, start = _children_cpu(), time.perf_counter()
            try:
                parsed = parse_file_isolated(path, max_bytes=20_000_000, limits=limits)
                outcome = f"parsed: {len(parsed.text):,} characters"
            except ParseError as exc:
                outcome = f"refused: {exc}"
            wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
            rows.append(
                {"file": upload.name, "bytes": path.stat().st_size, "wall_s": round(wall, 3)}
                | {"child_cpu_s": round(cpu, 3), "outcome": outcome}
            )
            print(
                f"{upload.name:26} {path.stat().st_size:>8} B  wall {wall:6.2f} s  "
                f"cpu {cpu:6.2f} s  {outcome[:80]}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
