"""The web server's log never holds a query string: an admin search for a CPF stays out.

A real daphne, started as `make run` and the compose file start it (`-v 0`: no access log
of daphne's own), on the test database; the app's AccessLogMiddleware writes one line per
request with its path only.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from django.db import connection

from chatrag.dev import server as devserver
from tests.support import database_url

pytestmark = pytest.mark.django_db(transaction=True)

CPF = "529.982.247-25"


def test_the_server_log_has_each_request_without_its_query_string(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(dict(connection.settings_dict)),
        "CHATRAG_DEBUG": "1",
        "CHATRAG_ENV_FILE": str(tmp_path / "no-env-file"),
        "CHATRAG_VAR_DIR": str(tmp_path / "var"),
        "CHATRAG_EMBEDDER": "chatrag.dev.fakes.HashingEmbedder",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("REDIS_URL", None)
    port = devserver.free_port()
    log = tmp_path / "daphne.log"
    web = devserver.start_web(env, port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        devserver.wait_healthy(base, web)
        for path in (f"/admin/conversations/conversation/?q={CPF}", f"/?q={CPF}&x=1"):
            response = httpx.get(base + path, follow_redirects=False, timeout=30)
            assert response.status_code in (200, 302)
    finally:
        devserver.stop_process(web)
    text = log.read_text(errors="replace")
    # Each request is there, by method, path and status...
    assert "GET /admin/conversations/conversation/ 302" in text
    assert "GET / 302" in text or "GET / 200" in text
    # ...and nothing of what followed the "?" (daphne's own log printed the whole URL).
    assert CPF not in text and "529.982" not in text and "q=" not in text
