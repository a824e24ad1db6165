"""Fixtures shared by the conversation tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from pytest_httpserver import HTTPServer

from tests.support import close_postgres_layer, finish_turns


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings: Any) -> None:
    """The personas are created per test; PBKDF2 would cost a second each time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="module")
def model_server() -> Iterator[HTTPServer]:
    """A real local HTTP server for a model's protocol; threaded, so a stalled stream or
    request does not block the next one."""
    server = HTTPServer(threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest_asyncio.fixture
async def ws_settled() -> AsyncIterator[None]:
    """Around a WebSocket test: no rate-limit history (the shared cache) before it, and after
    it every turn it started has finished and the channel layer's pool (bound to its event
    loop) is closed."""
    from django.core.cache import cache

    from conversations.live import LIVE

    await cache.aclear()
    yield
    await finish_turns()
    await close_postgres_layer()
    await cache.aclear()
    LIVE.clear()
