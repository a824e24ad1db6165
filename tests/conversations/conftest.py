"""Fixtures shared by the conversation tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer


@pytest.fixture(scope="module")
def model_server() -> Iterator[HTTPServer]:
    """A real local HTTP server for a model's protocol; threaded, so a stalled stream or
    request does not block the next one."""
    server = HTTPServer(threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()
