"""The project's own settings, loaded as a server loads them, give working parts."""

from __future__ import annotations

import json
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


def _probe(extra_env: dict[str, str], code: str = PROBE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "chatrag.settings", "CHATRAG_DEBUG": "1"}
    env.pop("REDIS_URL", None)
    env.update(extra_env)
    return subprocess.run(
        [sys.executable, "-c", code],
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


# --- security settings, as a production server loads them ---------------------------------------

SECURITY_SETTINGS = [
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SESSION_COOKIE_HTTPONLY",
    "CSRF_COOKIE_HTTPONLY",
    "SESSION_COOKIE_SAMESITE",
    "CSRF_COOKIE_SAMESITE",
    "SECURE_HSTS_SECONDS",
    "SECURE_PROXY_SSL_HEADER",
    "AXES_FAILURE_LIMIT",
    "AXES_COOLOFF_TIME",
    "AXES_LOCKOUT_PARAMETERS",
    "AUTHENTICATION_BACKENDS",
    "MIDDLEWARE",
]
SECURITY_PROBE = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    f"print(json.dumps({{k: getattr(s, k, None) for k in {SECURITY_SETTINGS!r}}}, default=str))"
)
PRODUCTION = {"CHATRAG_DEBUG": "0", "DJANGO_SECRET_KEY": "x9" * 30 + "-production-like-test-key"}


def _security(extra_env: dict[str, str]) -> dict[str, object]:
    done = _probe(extra_env, SECURITY_PROBE)
    assert done.returncode == 0, done.stderr[-2000:]
    values: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return values


def test_production_defaults_are_secure() -> None:
    values = _security(PRODUCTION)
    assert values["SESSION_COOKIE_SECURE"] is True and values["CSRF_COOKIE_SECURE"] is True
    assert values["SESSION_COOKIE_HTTPONLY"] is True and values["CSRF_COOKIE_HTTPONLY"] is True
    assert values["SESSION_COOKIE_SAMESITE"] == values["CSRF_COOKIE_SAMESITE"] == "Lax"
    assert values["SECURE_HSTS_SECONDS"] == 31_536_000
    assert values["SECURE_PROXY_SSL_HEADER"] is None  # only when the proxy is trusted
    assert values["AXES_FAILURE_LIMIT"] == 5 and values["AXES_COOLOFF_TIME"] == "0:15:00"
    assert values["AXES_LOCKOUT_PARAMETERS"] == [["username", "ip_address"]]
    backends = values["AUTHENTICATION_BACKENDS"]
    assert isinstance(backends, list) and backends[0] == "axes.backends.AxesStandaloneBackend"
    middleware = values["MIDDLEWARE"]
    assert isinstance(middleware, list) and middleware[-1] == "axes.middleware.AxesMiddleware"


def test_debug_relaxes_only_what_plain_http_needs() -> None:
    values = _security({"CHATRAG_DEBUG": "1"})
    assert values["SESSION_COOKIE_SECURE"] is False and values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_HTTPONLY"] is True and values["AXES_FAILURE_LIMIT"] == 5


def test_security_settings_follow_the_environment() -> None:
    values = _security(
        {
            **PRODUCTION,
            "CHATRAG_COOKIE_SAMESITE": "Strict",
            "CHATRAG_HSTS_SECONDS": "600",
            "CHATRAG_TRUST_X_FORWARDED_PROTO": "1",
            "CHATRAG_LOGIN_FAILURE_LIMIT": "3",
            "CHATRAG_LOGIN_COOLOFF_MINUTES": "0.5",
        }
    )
    assert values["SESSION_COOKIE_SAMESITE"] == values["CSRF_COOKIE_SAMESITE"] == "Strict"
    assert values["SECURE_HSTS_SECONDS"] == 600
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["AXES_FAILURE_LIMIT"] == 3 and values["AXES_COOLOFF_TIME"] == "0:00:30"


def test_bad_security_setting_names_the_variable() -> None:
    done = _probe({"CHATRAG_COOKIE_SAMESITE": "None"})
    assert done.returncode != 0 and "CHATRAG_COOKIE_SAMESITE must be one of" in done.stderr
    done = _probe({"CHATRAG_LOGIN_FAILURE_LIMIT": "0"})
    assert done.returncode != 0 and "CHATRAG_LOGIN_FAILURE_LIMIT must be >= 1" in done.stderr


def test_deploy_checks_pass_with_production_settings() -> None:
    """Django's own `check --deploy` finds nothing with a full production environment."""
    env = {
        **os.environ,
        **PRODUCTION,
        "DJANGO_SETTINGS_MODULE": "chatrag.settings",
        "CHATRAG_SSL_REDIRECT": "1",
        "CHATRAG_HSTS_INCLUDE_SUBDOMAINS": "1",
        "CHATRAG_HSTS_PRELOAD": "1",
    }
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
