"""A real server for the browser tests, and Debian's chromium driven by Playwright.

- The server is daphne (pytest-django's `live_server` cannot serve Channels) on a database of
  its own, `chatrag_e2e`, created on the Postgres server the other tests use, migrated and
  seeded with the demo knowledge base and users by `manage.py seed_demo`.
- A second daphne on the same database has a slow scripted chat model, so that reloading
  and stopping mid-answer are deterministic.
- Chromium is /usr/bin/chromium, never a downloaded build. Without it the tests skip, unless
  CHATRAG_REQUIRE_BROWSER=1 (CI), where they fail.
- These tests never use the `db` fixture: they read the e2e database with psycopg.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support import web_servers

BASE_DIR = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
E2E_DATABASE = "chatrag_e2e"
ARTIFACTS = Path(os.environ.get("CHATRAG_ARTIFACTS", "artifacts")).resolve()
SCREENSHOTS = ARTIFACTS / "screenshots"
DEMO_PASSWORDS = {"ana": "ana-demo-2026", "rita": "rita-demo-2026", "admin": "admin-demo-2026"}


@dataclass
class E2EDatabase:
    conninfo: dict[str, Any]
    url: str

    def query(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(**self.conninfo, dbname=E2E_DATABASE) as conn:
            return conn.execute(sql, params or []).fetchall()


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)"
    if os.environ.get("CHATRAG_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + " (CHATRAG_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason)


def _server_settings() -> dict[str, Any]:
    """Where the tests' Postgres server is (the same one, whichever database is current)."""
    from django.db import connection

    db = connection.settings_dict
    return {
        "host": db.get("HOST") or "",
        "port": str(db.get("PORT") or "5432"),
        "user": db.get("USER") or "postgres",
        "password": db.get("PASSWORD") or "",
    }


def _database_url(server: dict[str, Any], name: str) -> str:
    auth = quote(server["user"], safe="")
    if server["password"]:
        auth += ":" + quote(server["password"], safe="")
    # A Unix socket folder goes percent-encoded in the host part: with the `?host=` form,
    # dj-database-url puts it in OPTIONS, which the search engine's conninfo ignores.
    host = quote(server["host"] or "localhost", safe="")
    return f"postgresql://{auth}@{host}:{server['port']}/{name}"


def _admin(server: dict[str, Any], statement: str) -> None:
    import psycopg

    params = {k: v for k, v in server.items() if v}
    with psycopg.connect(**params, dbname="postgres", autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(scope="session")
def e2e_env() -> Iterator[tuple[dict[str, str], E2EDatabase]]:
    """A fresh `chatrag_e2e` database with the demo data; dropped at the end."""
    _require_chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    server = _server_settings()
    _admin(server, f'DROP DATABASE IF EXISTS "{E2E_DATABASE}" WITH (FORCE)')
    _admin(server, f'CREATE DATABASE "{E2E_DATABASE}"')
    url = _database_url(server, E2E_DATABASE)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "chatrag.settings",
        "CHATRAG_DEBUG": "1",
        "CHATRAG_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "CHATRAG_RATE_LIMIT_PER_MINUTE": "1000",
        "CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE": "1000",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
        # `tests.browser.*` (settings, the slow model) must import in the subprocesses.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BASE_DIR), os.environ.get("PYTHONPATH")])),
    }
    env.pop("CHATRAG_LLM_BACKEND", None)  # no model server: rule rewrite, extractive answers
    setup_log = ARTIFACTS / "e2e-setup.log"
    try:
        with setup_log.open("wb") as out:
            for command in (["migrate", "--noinput"], ["seed_demo"]):
                done = subprocess.run(
                    [sys.executable, "manage.py", *command],
                    cwd=BASE_DIR,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=900,
                    check=False,
                )
                if done.returncode:
                    pytest.fail(
                        f"manage.py {' '.join(command)} failed:\n{setup_log.read_text()[-3000:]}"
                    )
        conninfo = {k: v for k, v in server.items() if v}
        yield env, E2EDatabase(conninfo=conninfo, url=url)
    finally:
        try:
            _admin(server, f'DROP DATABASE IF EXISTS "{E2E_DATABASE}" WITH (FORCE)')
        except Exception as exc:  # a failed drop must not hide the test result
            print(f"could not drop {E2E_DATABASE}: {exc}", file=sys.stderr)


@pytest.fixture(scope="session")
def e2e_db(e2e_env: tuple[dict[str, str], E2EDatabase]) -> E2EDatabase:
    return e2e_env[1]


@pytest.fixture(scope="session")
def live_url(e2e_env: tuple[dict[str, str], E2EDatabase]) -> Iterator[str]:
    """The app under daphne with no model server (rule rewrite, extractive answers)."""
    with web_servers(e2e_env[0], ARTIFACTS, name="e2e-daphne") as (server,):
        yield server.url


@pytest.fixture(scope="session")
def slow_url(e2e_env: tuple[dict[str, str], E2EDatabase]) -> Iterator[str]:
    """The app with a scripted model that streams for about a minute."""
    env = {**e2e_env[0], "CHATRAG_LLM_BACKEND": "tests.browser.slow_model.SlowChat"}
    env["CHATRAG_LLM_TIMEOUT"] = "5"
    with web_servers(env, ARTIFACTS, name="e2e-daphne-slow") as (server,):
        yield server.url


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser profile state (cookies, storage) per test, in Portuguese."""
    ctx = browser.new_context(
        viewport={"width": 1280, "height": 860}, locale="pt-BR", device_scale_factor=1
    )
    ctx.set_default_timeout(20_000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: Any) -> Any:
    return context.new_page()
