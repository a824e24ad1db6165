"""Every command the documentation prints as runnable runs as printed.

A fenced `sh` block right after a `<!-- runnable -->` line in a page under docs/ is run with
bash from the repository root, line by line (set -e), against a database of this module's own
(migrated first, as after `make run`) with the hashing embedder; it must exit 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support import BASE_DIR, database_url, manage

pytestmark = pytest.mark.slow

RUNNABLE = re.compile(r"^<!-- runnable -->\n```(?:sh|bash|shell)\n(.*?)^```", re.M | re.S)


def runnable_blocks() -> list[tuple[str, str]]:
    """(page, script) of each block marked runnable, in page order."""
    blocks = []
    for page in sorted((BASE_DIR / "docs").rglob("*.md")):
        for match in RUNNABLE.finditer(page.read_text()):
            blocks.append((page.relative_to(BASE_DIR).as_posix(), match[1]))
    return blocks


def test_the_extractor_finds_the_marked_blocks() -> None:
    pages = {page for page, _ in runnable_blocks()}
    assert {"docs/ingestion.md", "docs/evaluation.md"} <= pages
    assert not RUNNABLE.search("<!-- runnable -->\n```python\nprint(1)\n```\n")


def test_every_runnable_command_runs_as_printed(tmp_path: Path) -> None:
    from django.conf import settings

    blocks = runnable_blocks()
    admin = dict(settings.DATABASES["default"])
    name = f"test_docs_{os.getpid()}"
    admin_url = database_url({**admin, "NAME": "postgres"})
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    env = {
        **os.environ,
        "DATABASE_URL": database_url({**admin, "NAME": name}),
        "CHATRAG_DEBUG": "1",
        "CHATRAG_ENV_FILE": str(tmp_path / "no-env-file"),
        "CHATRAG_VAR_DIR": str(tmp_path / "var"),
        "CHATRAG_EMBEDDER": "chatrag.dev.fakes.HashingEmbedder",
        "CHATRAG_LLM_BACKEND": "",
    }
    env.pop("REDIS_URL", None)
    try:
        # Before the first migrate, `evaluate` says what to do (it died with a traceback).
        early = subprocess.run(
            [sys.executable, "manage.py", "evaluate", "--corpus", "demo/kb", "--tasks",
             "demo/eval/tasks.jsonl", "--limit", "1"],
            cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert early.returncode == 1, early.stdout + early.stderr
        assert "run `manage.py migrate` first" in early.stderr
        assert "Traceback" not in early.stderr
        manage(env, "migrate", "--noinput")
        for page, script in blocks:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=BASE_DIR,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            output = (done.stdout + done.stderr)[-3000:]
            assert done.returncode == 0, f"{page}:\n{script}\n{output}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(drop)
