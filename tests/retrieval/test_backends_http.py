"""The backends' shared HTTP plumbing against real local servers, and how each backend words
its failures (`retrieval.backends.http`; the chat models' own tests are test_llm.py)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from retrieval.backends.http import (
    ERROR_DETAIL_CHARS,
    AsyncHTTP,
    HTTPFailure,
    SyncHTTP,
    error_detail,
    headers,
    v1_url,
)
from retrieval.embeddings import EmbeddingError, OllamaEmbedder, OpenAIEmbedder
from retrieval.pipeline.llm import LLMError, LLMHTTPError, LLMTimeout, OllamaChat

DIM = 3


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def hangs_up() -> Iterator[str]:
    """A real TCP server that accepts each connection and closes it without a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    server.close()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets a stalled handler go on; always set at the end so no server thread lingers."""
    event = threading.Event()
    yield event
    event.set()


def _slow(release: threading.Event) -> Any:
    def handler(request: Request) -> Response:
        release.wait(5)
        return Response("{}", mimetype="application/json")

    return handler


def _drain(httpserver: HTTPServer, release: threading.Event) -> None:
    """Let a stalled request finish before the test ends (the server answers one at a time),
    so that it lands in no later test's log."""
    release.set()
    httpserver.expect_request("/__drain").respond_with_data("ok")
    httpx.get(httpserver.url_for("/__drain"), timeout=10)


def _kind(call: Any) -> HTTPFailure:
    with pytest.raises(HTTPFailure) as info:
        call()
    return info.value


# --- pure parts ----------------------------------------------------------------------------


def test_v1_is_joined_once_whether_the_base_url_has_it_or_not() -> None:
    for base in ("http://m:8080", "http://m:8080/", "http://m:8080/v1", "http://m:8080/v1/"):
        assert v1_url(base, "/embeddings") == "http://m:8080/v1/embeddings", base
    assert v1_url("http://m/proxy/v1", "/chat/completions") == "http://m/proxy/v1/chat/completions"


def test_headers_carry_the_key_only_when_there_is_one() -> None:
    assert headers(None) == headers("") == {"Accept": "application/json"}
    assert headers("sk-1")["Authorization"] == "Bearer sk-1"


def test_error_detail_reads_the_usual_error_bodies() -> None:
    assert error_detail(b'{"error": "model not found"}') == "model not found"
    assert error_detail(b'{"error": {"message": "bad key", "code": 401}}') == "bad key"
    assert error_detail(b'{"detail": [{"loc": "x"}]}') == '[{"loc": "x"}]'
    assert error_detail(b"  <html>\n Bad   Gateway </html> ") == "<html> Bad Gateway </html>"
    long = error_detail(b"x" * 1000)
    assert len(long) == ERROR_DETAIL_CHARS + 3 and long.endswith("...")


# --- the sync client -----------------------------------------------------------------------


def test_sync_post_sends_headers_and_returns_json(httpserver: HTTPServer) -> None:
    httpserver.expect_request(
        "/v1/embeddings", headers={"Authorization": "Bearer k", "Accept": "application/json"}
    ).respond_with_json({"ok": 1})
    http = SyncHTTP(httpserver.url_for("/v1/"), "k", timeout=5)
    assert http.post_json(v1_url(http.base_url, "/embeddings"), {"a": 1}) == {"ok": 1}
    assert json.loads(httpserver.log[0][0].get_data()) == {"a": 1}
    http.close()
    assert http.client.is_closed


def test_sync_failures_are_classified(
    httpserver: HTTPServer, hangs_up: str, release: threading.Event
) -> None:
    httpserver.expect_request("/500").respond_with_json({"error": "overloaded"}, status=500)
    httpserver.expect_request("/html").respond_with_data("<html>proxy</html>")
    httpserver.expect_request("/slow").respond_with_handler(_slow(release))
    http = SyncHTTP(httpserver.url_for("/"), timeout=0.3)

    status = _kind(lambda: http.post_json(httpserver.url_for("/500"), {}))
    assert (status.kind, status.status, status.detail) == ("status", 500, "overloaded")
    assert _kind(lambda: http.post_json(httpserver.url_for("/html"), {})).kind == "json"
    timeout = _kind(lambda: http.post_json(httpserver.url_for("/slow"), {}))
    assert timeout.kind == "timeout" and isinstance(timeout.cause, httpx.TimeoutException)
    _drain(httpserver, release)
    refused = f"http://127.0.0.1:{_closed_port()}/x"
    failure = _kind(lambda: http.post_json(refused, {}))
    assert (failure.kind, failure.url) == ("connect", refused)
    assert _kind(lambda: http.post_json(f"{hangs_up}/x", {})).kind == "request"


def test_a_borrowed_client_is_left_open() -> None:
    with httpx.Client() as client:
        SyncHTTP("http://m", timeout=1, client=client).close()
        assert not client.is_closed


# --- the async client ----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_deadline_status_and_stream_failures(
    httpserver: HTTPServer, release: threading.Event
) -> None:
    httpserver.expect_request("/slow").respond_with_handler(_slow(release))
    httpserver.expect_request("/stream").respond_with_json({"error": "no such model"}, status=404)
    httpserver.expect_request("/lines").respond_with_data("a\nb\n")
    async with httpx.AsyncClient() as client:
        http = AsyncHTTP(httpserver.url_for("/"), None, client)
        with pytest.raises(HTTPFailure) as slow:
            # The deadline bounds the whole call, even where httpx's own timeout would not.
            await http.post(httpserver.url_for("/slow"), {}, 0.2)
        assert slow.value.kind == "timeout"
        release.set()
        refused = await http.post(httpserver.url_for("/stream"), {}, 5)
        assert refused.status_code == 404  # `post` returns any status: the caller decides
        with pytest.raises(HTTPFailure) as stream:
            async for _ in http.stream_lines(httpserver.url_for("/stream"), {}, 5):
                pass
        assert (stream.value.kind, stream.value.status) == ("status", 404)
        assert stream.value.detail == "no such model"
        lines = [line async for line in http.stream_lines(httpserver.url_for("/lines"), {}, 5)]
        assert lines == ["a", "b"]
        with pytest.raises(HTTPFailure) as down:
            await http.post(f"http://127.0.0.1:{_closed_port()}/x", {}, 2)
        assert down.value.kind == "connect"
        await http.aclose()
        assert not client.is_closed  # borrowed
    owned = AsyncHTTP("http://m")
    await owned.aclose()
    assert owned.client.is_closed


# --- each backend words the failures as its own errors -------------------------------------


def _embedder(cls: type[OpenAIEmbedder | OllamaEmbedder], url: str, timeout: float = 5) -> Any:
    return cls(base_url=url, model="e5", api_key="", timeout=timeout, dim=DIM)


@pytest.mark.parametrize("base", ["/", "/v1", "/v1/"])
def test_openai_embedder_posts_to_v1_embeddings(httpserver: HTTPServer, base: str) -> None:
    httpserver.expect_request("/v1/embeddings", method="POST").respond_with_json(
        {"data": [{"index": 1, "embedding": [0, 1, 0]}, {"index": 0, "embedding": [1, 0, 0]}]}
    )
    embedder = _embedder(OpenAIEmbedder, httpserver.url_for(base))
    assert embedder.embed_queries(["a", "b"]) == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert json.loads(httpserver.log[0][0].get_data()) == {"model": "e5", "input": ["a", "b"]}


def test_ollama_embedder_posts_to_api_embed(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/embed").respond_with_json({"embeddings": [[1, 2, 3]]})
    assert _embedder(OllamaEmbedder, httpserver.url_for("/")).embed_passages(["a"]) == [
        [1.0, 2.0, 3.0]
    ]


def test_embedder_failures_keep_their_words(
    httpserver: HTTPServer, hangs_up: str, release: threading.Event
) -> None:
    cases = {
        "/500/": ("status", "embedding server answered HTTP 500"),
        "/html/": ("json", "embedding server answered invalid JSON"),
        "/slow/": ("timeout", "embedding server timed out (ReadTimeout)"),
    }
    httpserver.expect_request("/500/v1/embeddings").respond_with_json({"error": "x"}, status=500)
    httpserver.expect_request("/html/v1/embeddings").respond_with_data("<html>")
    httpserver.expect_request("/slow/v1/embeddings").respond_with_handler(_slow(release))
    for path, (kind, words) in cases.items():
        embedder = _embedder(OpenAIEmbedder, httpserver.url_for(path), timeout=0.3)
        with pytest.raises(EmbeddingError) as info:
            embedder.embed_queries(["a"])
        assert str(info.value) == words, kind
    _drain(httpserver, release)
    for url in (f"http://127.0.0.1:{_closed_port()}", hangs_up):
        with pytest.raises(EmbeddingError, match="^embedding server unreachable: "):
            _embedder(OllamaEmbedder, url).embed_queries(["a"])


@pytest.mark.asyncio
async def test_chat_failures_keep_their_words(
    httpserver: HTTPServer, hangs_up: str, release: threading.Event
) -> None:
    httpserver.expect_request("/a/api/chat").respond_with_json({"error": "boom"}, status=503)
    httpserver.expect_request("/b/api/chat").respond_with_handler(_slow(release))
    async with OllamaChat(httpserver.url_for("/a"), "m") as model:
        with pytest.raises(LLMHTTPError, match="^ollama answered http 503: boom$"):
            await model.complete_json([], {}, timeout=5)
    async with OllamaChat(httpserver.url_for("/b"), "m") as model:
        with pytest.raises(LLMTimeout, match="^ollama timed out after 0.2s$"):
            await model.complete_json([], {}, timeout=0.2)
    _drain(httpserver, release)
    async with OllamaChat(hangs_up, "m") as model:
        with pytest.raises(LLMError, match=f"^ollama request to {hangs_up}/api/chat failed: "):
            await model.complete_json([], {}, timeout=5)
