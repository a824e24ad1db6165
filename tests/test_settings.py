"""The project's own settings, loaded as a server loads them, give working parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PROBE = (
    "import django; django.setup(); "
    "from channels.layers import get_channel_layer; "
    "print(type(get_channel_layer()).__name__)"
)


def _probe(extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "chatrag.settings", "CHATRAG_DEBUG": "1"}
    env.pop("REDIS_URL", None)
    env.update(extra_env)
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_default_settings_build_the_postgres_channel_layer() -> None:
    done = _probe({})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "PostgresChannelLayer"


def test_redis_url_switches_the_channel_layer() -> None:
    done = _probe({"REDIS_URL": "redis://127.0.0.1:6379/15"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "RedisChannelLayer"


def test_production_settings_refuse_to_start_without_a_secret() -> None:
    env = {"CHATRAG_DEBUG": "0", "DJANGO_SECRET_KEY": ""}
    done = _probe(env)
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY is unset" in done.stderr


def test_bad_numeric_setting_names_the_variable() -> None:
    done = _probe({"CHATRAG_SEARCH_RRF_K": "sixty"})
    assert done.returncode != 0
    assert "CHATRAG_SEARCH_RRF_K must be an integer" in done.stderr
