"""Both deployment modes' plumbing: the Channels layer and a real Celery worker.

Default mode: the Postgres channel layer and Celery's filesystem broker (no extra server).
Redis mode (`REDIS_URL`): channels_redis and a Redis broker; these tests run when
`CHATRAG_TEST_REDIS_URL` names a Redis server, and are skipped otherwise.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import channels_postgres.db
import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import connections

from tests.support import celery_call, start_celery_worker

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("CHATRAG_TEST_REDIS_URL", "")
needs_redis = pytest.mark.skipif(
    not REDIS_URL, reason="set CHATRAG_TEST_REDIS_URL to a Redis server to run the Redis mode"
)
WAIT_S = 20  # a hang guard, never a performance assertion


# --- the channel layer ----------------------------------------------------------------------------


async def _receive(layer: BaseChannelLayer, channel: str) -> dict[str, Any]:
    return await asyncio.wait_for(layer.receive(channel), WAIT_S)


async def _group_round_trip(layer: BaseChannelLayer) -> None:
    """Two channels in a group both get a group message; one that left gets no more."""
    first = await layer.new_channel()
    second = await layer.new_channel()
    group = f"conversation-test-{uuid.uuid4().hex[:12]}"
    event = {"type": "turn.event", "event": {"type": "delta", "delta": "olá ✓", "offset": 0}}
    await layer.group_add(group, first)
    await layer.group_add(group, second)
    await layer.group_send(group, event)
    assert await _receive(layer, first) == event
    assert await _receive(layer, second) == event

    await layer.group_discard(group, second)
    later = {"type": "turn.event", "event": {"type": "done", "text": "x" * 20_000}}  # > NOTIFY
    await layer.group_send(group, later)
    await layer.send(second, {"type": "direct"})
    assert await _receive(layer, first) == later
    assert await _receive(layer, second) == {"type": "direct"}  # the group message skipped it


@pytest_asyncio.fixture
async def postgres_layer_closed() -> AsyncIterator[None]:
    yield
    # channels_postgres keeps one process-wide pool, bound to this test's event loop.
    pool = channels_postgres.db.connection_pool
    if pool is not None:
        await pool.close()
        channels_postgres.db.connection_pool = None
    channels_postgres.db.is_creating_connection_pool = asyncio.Lock()
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:  # its LISTEN task and delayed clean-ups
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
    # group_discard deletes through the ORM in a worker thread: close what it opened there.
    await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.asyncio
async def test_default_postgres_layer_delivers_group_messages(
    settings: Any, postgres_layer_closed: None
) -> None:
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "chatrag.layers.PostgresChannelLayer"
    layer = get_channel_layer()
    assert layer is not None, "the default channel layer cannot be built from its settings"
    await _group_round_trip(layer)


@needs_redis
@pytest.mark.redis
@pytest.mark.asyncio
async def test_redis_layer_delivers_group_messages(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": f"chatrag-test-{uuid.uuid4().hex[:8]}"},
        }
    }
    layer = get_channel_layer()
    assert layer is not None
    try:
        await _group_round_trip(layer)
    finally:
        await layer.flush()
        await layer.close_pools()


# --- a real Celery worker -------------------------------------------------------------------------


def _celery_env(tmp_path: Path, redis_url: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "CHATRAG_VAR_DIR": str(tmp_path / "var"),
        "CHATRAG_DEBUG": "1",
        # The processes run in tmp_path (so nothing they write lands in the checkout).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("REDIS_URL", None)
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


@pytest.fixture
def worker_queue() -> str:
    """A queue of this test's own, so a shared Redis never hands its task to another worker."""
    return f"chatrag-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def stopped_after() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Workers started by a test; terminated (then killed if need be) at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for worker in started:
        worker.terminate()
        try:
            worker.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _send_and_wait(
    tmp_path: Path,
    redis_url: str | None,
    queue: str,
    started: list[subprocess.Popen[bytes]],
) -> None:
    env = _celery_env(tmp_path, redis_url)
    log = tmp_path / "worker.log"
    worker = start_celery_worker(env, log, tmp_path, queue=queue)
    started.append(worker)
    token = uuid.uuid4().hex
    task_id = celery_call(env, tmp_path, "celery.accumulate", token, queue=queue)
    assert uuid.UUID(task_id)
    deadline = time.monotonic() + 120  # a hang guard
    done = f"Task celery.accumulate[{task_id}] succeeded"
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        if done in text:
            break
        assert worker.poll() is None, f"the worker exited early:\n{text[-3000:]}"
        assert time.monotonic() < deadline, f"the task never ran:\n{text[-3000:]}"
        time.sleep(0.2)
    line = next(x for x in text.splitlines() if done in x)
    assert token in line  # the worker ran it with our argument


def test_celery_worker_runs_a_task_with_the_filesystem_broker(
    tmp_path: Path, worker_queue: str, stopped_after: list[subprocess.Popen[bytes]]
) -> None:
    _send_and_wait(tmp_path, None, worker_queue, stopped_after)
    # The broker lived in the CHATRAG_VAR_DIR given, not in the project's .var, and its
    # exchange table was not written into whatever directory the processes started in.
    assert (tmp_path / "var" / "celery-broker" / "queue").is_dir()
    assert not (tmp_path / "control").exists()


@needs_redis
@pytest.mark.redis
def test_celery_worker_runs_a_task_with_the_redis_broker(
    tmp_path: Path, worker_queue: str, stopped_after: list[subprocess.Popen[bytes]]
) -> None:
    _send_and_wait(tmp_path, REDIS_URL, worker_queue, stopped_after)
    assert not (tmp_path / "var" / "celery-broker").exists()
