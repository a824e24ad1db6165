"""Running turns across web processes: two daphne servers on one database, as behind nginx.

- Both servers share a database of this module's own (on the suite's PostgreSQL) and, in the
  Redis mode, a Redis; nothing else: each has its own registry of running turns.
- The chat model is the fake Ollama server (`chatrag.dev.fakemodel`), held after its first piece
  so that a turn is still being written when the other server is asked to stop it.
- A browser's part is played by `websockets` clients with the session cookie of a real login.
- A user may hold SOCKETS sockets on both servers together; a place lasts PLACE_S seconds
  unless its socket refreshes it, so a frozen server's sockets give theirs up quickly.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from chatrag.dev.fakemodel import FakeModelConfig, FakeModelServer
from tests.support import (
    SERVER_WAIT_S,
    app_env,
    app_seed,
    chat_socket,
    database_url,
    login,
    socket_until,
    web_servers,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

LIMIT = 3  # messages a minute per user, on both servers together
SOCKETS = 3  # open sockets per user, on both servers together
PLACE_S = 3  # how long a socket's place outlives its refreshes
DOCUMENTS = ["pt/ferias-regras-gerais", "pt/vale-refeicao-regra-geral"]
REDIS_URL = os.environ.get("CHATRAG_TEST_REDIS_URL", "")


@dataclass
class Servers:
    urls: tuple[str, str]
    webs: tuple[Any, Any]
    model: FakeModelServer
    conninfo: str

    def query(self, statement: Any, params: list[Any]) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.conninfo) as conn:
            return conn.execute(statement, params).fetchall()


def _admin_conninfo() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.DATABASES["default"])


@pytest.fixture(
    scope="module",
    params=[
        "postgres",
        pytest.param("redis", marks=pytest.mark.redis),
    ],
)
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    """Two daphne processes on one fresh database (and Redis in the Redis mode)."""
    mode = request.param
    if mode == "redis" and not REDIS_URL:
        pytest.skip("set CHATRAG_TEST_REDIS_URL to a Redis server to run the Redis mode")
    tmp = tmp_path_factory.mktemp(f"live-{mode}")
    name = f"test_live_{os.getpid()}_{mode}"
    admin = _admin_conninfo()
    url = database_url({**admin, "NAME": name})
    admin_url = database_url({**admin, "NAME": "postgres"})
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    model = FakeModelServer(FakeModelConfig(latency=0.05, gap=0.05, pieces=40)).start()
    try:
        env = app_env(
            database_url=url,
            tmp=tmp,
            model_url=model.url,
            rate_limit=LIMIT,
            CHATRAG_MAX_SOCKETS_PER_USER=str(SOCKETS),
            CHATRAG_SOCKET_SLOT_SECONDS=str(PLACE_S),
            # The shared Redis keeps this run's counts apart from any other's.
            CHATRAG_CACHE_KEY_PREFIX=f"test-{uuid.uuid4().hex[:8]}",
            **({"REDIS_URL": REDIS_URL} if mode == "redis" else {}),
        )
        app_seed(env, DOCUMENTS)
        with web_servers(env, tmp, count=2) as (first, second):
            yield Servers(
                urls=(first.url, second.url),
                webs=(first.process, second.process),
                model=model,
                conninfo=url,
            )
    finally:
        model.stop()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


async def _pong(socket: ClientConnection) -> list[dict[str, Any]]:
    """Everything the server sent before answering a ping (frames are answered in order)."""
    await socket.send(json.dumps({"type": "ping"}))
    return (await socket_until(socket, "pong"))[:-1]


async def _writing(socket: ClientConnection, text: str) -> tuple[int, int, int]:
    """Ask on `socket` and wait until the answer is being written: (conversation, q, a)."""
    await socket.send(json.dumps({"type": "message", "conversation": None, "text": text}))
    frames = await socket_until(socket, "delta")
    accepted = next(f for f in frames if f["type"] == "accepted")
    sources = next(f for f in frames if f["type"] == "sources")
    return accepted["conversation"], accepted["message_id"], sources["message_id"]


async def test_a_stop_on_one_server_stops_the_turn_running_on_the_other(servers: Servers) -> None:
    first, second = servers.urls
    cookie = await login(first, "ana", "ana-demo-2026")
    servers.model.hold()
    try:
        async with chat_socket(first, cookie) as asking, chat_socket(second, cookie) as other:
            conversation, question, answer = await _writing(asking, "quantos dias de férias?")
            # The other tab, on the other server, follows the conversation and presses stop.
            await other.send(json.dumps({"type": "open", "conversation": conversation}))
            snapshot = (await socket_until(other, "snapshot"))[-1]
            assert snapshot["message_id"] == answer
            await other.send(json.dumps({"type": "stop", "message_id": question}))

            # The model is still holding the stream: only the stop can end the turn.
            done = (await socket_until(asking, "done"))[-1]
            assert (done["message_id"], done["status"]) == (answer, "stopped")
            relayed = (await socket_until(other, "done"))[-1]
            assert relayed["status"] == "stopped"
            # The stop was confirmed: the other tab is not told it failed.
            await asyncio.sleep(3.5)  # past the consumer's STOP_ACK_S
            assert not [f for f in await _pong(other) if f["type"] == "error"]
    finally:
        servers.model.release()
    rows = servers.query("SELECT status FROM conversations_message WHERE id = %s", [answer])
    assert rows == [("stopped",)]


async def test_the_rate_limit_is_counted_once_across_both_servers(servers: Servers) -> None:
    first, second = servers.urls
    cookie = await login(first, "rita", "rita-demo-2026")
    async with chat_socket(first, cookie) as on_first, chat_socket(second, cookie) as on_second:
        sockets = [on_first, on_second, on_first]  # LIMIT messages, split over both servers
        for i, socket in enumerate(sockets):
            await socket.send(
                json.dumps({"type": "message", "conversation": None, "text": f"férias {i}?"})
            )
            accepted = await socket_until(socket, "accepted", "error")
            assert accepted[-1]["type"] == "accepted", accepted[-1]
        # A fourth on the server that has seen only one: one allowance, not one per server.
        await on_second.send(json.dumps({"type": "message", "conversation": None, "text": "e?"}))
        refused = (await socket_until(on_second, "accepted", "error"))[-1]
        assert (refused["type"], refused["code"]) == ("error", "rate_limited")
        for socket in (on_first, on_second):  # let the turns finish before the sockets go
            await socket_until(socket, "done", "clarify", "error")
    count = servers.query(
        "SELECT count(*) FROM conversations_message m "
        "JOIN conversations_conversation c ON c.id = m.conversation_id "
        "JOIN auth_user u ON u.id = c.owner_id WHERE u.username = 'rita' AND m.role = 'user'",
        [],
    )
    assert count == [(LIMIT,)]


async def test_a_stop_that_cannot_reach_the_turn_is_told_to_the_user(servers: Servers) -> None:
    """The server running the turn does not answer (frozen): the other tells its user."""
    first, second = servers.urls
    cookie = await login(second, "admin", "admin-demo-2026")
    servers.model.hold()
    frozen = servers.webs[0]
    try:
        async with chat_socket(first, cookie) as asking, chat_socket(second, cookie) as other:
            _conversation, question, _answer = await _writing(asking, "e o vale-refeição?")
            os.kill(frozen.pid, signal.SIGSTOP)
            try:
                await other.send(json.dumps({"type": "stop", "message_id": question}))
                error = (await socket_until(other, "error"))[-1]
                assert error["code"] == "stop_failed"
                assert "could not be stopped" in error["message"]
                assert "reply_to" not in error  # a notice: the turn itself is left as it is
            finally:
                os.kill(frozen.pid, signal.SIGCONT)
            servers.model.release()
            # Once it answers again, the server gets the stop that was waiting for it.
            done = (await socket_until(asking, "done"))[-1]
            assert done["status"] in {"stopped", "complete"}
    finally:
        servers.model.release()


async def _refused_for_the_cap(socket: ClientConnection) -> None:
    error = (await socket_until(socket, "error"))[-1]
    assert error["code"] == "too_many_sockets", error
    await asyncio.wait_for(socket.wait_closed(), SERVER_WAIT_S)
    assert socket.close_code == 4429


async def _accepted_when_a_place_frees(url: str, cookie: str) -> ClientConnection:
    """Open sockets on `url` until one is accepted (refused ones take no place)."""
    deadline = asyncio.get_running_loop().time() + SERVER_WAIT_S
    while True:
        socket = await chat_socket(url, cookie)
        try:
            await socket.send(json.dumps({"type": "ping"}))
            frame = json.loads(await asyncio.wait_for(socket.recv(), SERVER_WAIT_S))
        except ConnectionClosed:  # refused and closed before the ping got there
            frame = {"type": "error", "code": "too_many_sockets"}
        if frame["type"] == "pong":
            return socket
        assert frame["code"] == "too_many_sockets", frame
        await socket.close()
        assert asyncio.get_running_loop().time() < deadline, "no place was ever freed"
        await asyncio.sleep(0.5)


async def test_the_socket_cap_holds_across_both_servers_and_a_frozen_one_gives_way(
    servers: Servers,
) -> None:
    first, second = servers.urls
    frozen = servers.webs[1]
    cookie = await login(first, "ana", "ana-demo-2026")
    async with (
        chat_socket(first, cookie) as one,
        chat_socket(first, cookie) as two,
        chat_socket(second, cookie) as three,
    ):
        for socket in (one, two, three):
            assert await _pong(socket) == []
        # One more, on the server that holds only one of hers: refused, saying why.
        async with chat_socket(second, cookie) as over:
            await _refused_for_the_cap(over)

        # The second server hangs (or its process is gone): its socket's place expires.
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            newcomer = await _accepted_when_a_place_frees(first, cookie)
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
        # Back, it finds that place taken and none free: its socket is closed, not a fourth.
        await _refused_for_the_cap(three)
        for socket in (one, two, newcomer):
            assert await _pong(socket) == []
        await newcomer.close()
