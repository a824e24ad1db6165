"""The load script runs end to end: its own database, fake model and daphne, two users, ~5 s.

No timing is asserted (CI machines vary); only that turns completed and the report exists.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DEMO_KB
from tests.support import BASE_DIR

DOCUMENTS = ["pt/ferias-regras-gerais", "pt/vale-refeicao-regra-geral", "pt/reembolso-de-despesas"]


@pytest.mark.slow
def test_load_script_holds_two_users_and_writes_its_report(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    for name in DOCUMENTS:
        (kb / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO_KB / f"{name}.md", kb / f"{name}.md")
    report = tmp_path / "load.json"
    command = [sys.executable, "scripts/load_ws.py", "--serve", "--steps", "2", "--duration", "5"]
    command += ["--database", f"chatrag_load_smoke_{os.getpid()}", "--drop", "--kb", str(kb)]
    command += ["--embedder", "chatrag.dev.fakes.HashingEmbedder"]  # seeding in a second
    command += ["--json", str(report), "--logs", str(tmp_path)]
    env = {**os.environ, "CHATRAG_VAR_DIR": str(tmp_path / "var")}
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        command, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    logs = "".join(p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("load-*.log"))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:] + logs
    assert "largest N held" in done.stdout

    result = json.loads(report.read_text())
    (step,) = result["steps"]
    assert step["users"] == 2
    assert step["turns"] > 0 and step["failed"] == 0, (step, logs)
    for frame in ("rewrite", "sources", "delta", "done", "overhead"):
        assert set(step[frame]) == {"p50", "p95"}
    assert step["rewrite"]["p50"] <= step["sources"]["p50"] <= step["done"]["p50"]
    assert result["config"]["model_ms_before_first_delta"] == 600
