"""Chat backends against a real local HTTP server speaking each provider's protocol."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from retrieval.pipeline.llm import (
    ChatMessage,
    ChatModel,
    LLMError,
    LLMHTTPError,
    LLMProtocolError,
    LLMTimeout,
    OllamaChat,
    OpenAIChat,
)
from tests.fakes import FakeChat, FakeChatExhausted

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"queries": {"type": "array"}}}
MESSAGES = [
    ChatMessage(role="system", content="Rewrite the question."),
    ChatMessage(role="user", content="Quanto tempo de férias eu tenho?"),
]
REPLY = '{"queries": [{"text": "férias", "type": "normalize", "area": null}]}'


def _bodies(httpserver: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(request.get_data()) for request, _ in httpserver.log]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _drain(httpserver: HTTPServer) -> None:
    """Wait until the (single-threaded) test server has finished with a stalled request.

    Otherwise the stalled request would block the next test's requests and land in its log.
    """
    httpserver.expect_request("/__drain").respond_with_data("ok")
    async with httpx.AsyncClient() as client:
        await client.get(httpserver.url_for("/__drain"), timeout=10)


async def _collect(model: ChatModel, seconds: float = 5.0) -> list[str]:
    return [chunk async for chunk in model.stream(MESSAGES, timeout=seconds)]


# --- Ollama -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_ollama_complete_json_posts_schema_and_temperature_zero(
    httpserver: HTTPServer,
) -> None:
    httpserver.expect_request("/api/chat", method="POST").respond_with_json(
        {"model": "qwen", "message": {"role": "assistant", "content": REPLY}, "done": True}
    )
    async with OllamaChat(httpserver.url_for("/"), "qwen2.5:3b") as model:
        assert await model.complete_json(MESSAGES, SCHEMA, timeout=5) == REPLY
    (body,) = _bodies(httpserver)
    assert body == {
        "model": "qwen2.5:3b",
        "messages": [
            {"role": "system", "content": "Rewrite the question."},
            {"role": "user", "content": "Quanto tempo de férias eu tenho?"},
        ],
        "stream": False,
        "format": SCHEMA,
        "options": {"temperature": 0},
    }
    assert model.name == "qwen2.5:3b"


@pytest.mark.asyncio
async def test_ollama_stream_parses_ndjson_split_across_chunks(httpserver: HTTPServer) -> None:
    lines = [
        {"message": {"role": "assistant", "content": "Você tem "}, "done": False},
        {"message": {"role": "assistant", "content": "30 dias"}, "done": False},
        {"message": {"role": "assistant", "content": ""}, "done": True},
        {"message": {"role": "assistant", "content": "after done"}, "done": False},
    ]
    payload = "".join(json.dumps(line) + "\n" for line in lines)

    def body() -> Iterator[bytes]:
        # Cut the body at arbitrary points so that lines span network chunks.
        data = payload.encode()
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    httpserver.expect_request("/api/chat").respond_with_response(
        Response(body(), mimetype="application/x-ndjson")
    )
    async with OllamaChat(httpserver.url_for("/"), "qwen") as model:
        assert await _collect(model) == ["Você tem ", "30 dias"]
    (sent,) = _bodies(httpserver)
    assert sent["stream"] is True
    assert sent["options"] == {"temperature": 0}


@pytest.mark.asyncio
async def test_ollama_stream_error_line_raises_protocol_error(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/chat").respond_with_data(
        json.dumps({"message": {"content": "a"}, "done": False})
        + "\n"
        + json.dumps({"error": "model crashed"})
        + "\n"
    )
    async with OllamaChat(httpserver.url_for("/"), "qwen") as model:
        with pytest.raises(LLMProtocolError, match="model crashed"):
            await _collect(model)


@pytest.mark.asyncio
async def test_ollama_stream_cut_before_done_raises_protocol_error(
    httpserver: HTTPServer,
) -> None:
    httpserver.expect_request("/api/chat").respond_with_data(
        json.dumps({"message": {"content": "a"}, "done": False}) + "\n"
    )
    async with OllamaChat(httpserver.url_for("/"), "qwen") as model:
        with pytest.raises(LLMProtocolError, match="before done"):
            await _collect(model)


@pytest.mark.asyncio
async def test_ollama_http_500_raises_http_error_with_detail(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/chat").respond_with_json(
        {"error": "model 'nope' not found"}, status=500
    )
    async with OllamaChat(httpserver.url_for("/"), "nope") as model:
        with pytest.raises(LLMHTTPError) as info:
            await model.complete_json(MESSAGES, SCHEMA, timeout=5)
    assert info.value.status == 500
    assert "not found" in info.value.detail


@pytest.mark.asyncio
async def test_ollama_body_not_json_raises_protocol_error(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/chat").respond_with_data("<html>proxy</html>")
    async with OllamaChat(httpserver.url_for("/"), "qwen") as model:
        with pytest.raises(LLMProtocolError, match="not JSON"):
            await model.complete_json(MESSAGES, SCHEMA, timeout=5)


@pytest.mark.asyncio
async def test_ollama_slow_server_raises_timeout(httpserver: HTTPServer) -> None:
    release = threading.Event()

    def slow(request: Request) -> Response:
        release.wait(5)
        return Response(json.dumps({"message": {"content": REPLY}, "done": True}))

    httpserver.expect_request("/api/chat").respond_with_handler(slow)
    async with OllamaChat(httpserver.url_for("/"), "qwen") as model:
        started = time.monotonic()
        with pytest.raises(LLMTimeout) as info:
            await model.complete_json(MESSAGES, SCHEMA, timeout=0.15)
    assert time.monotonic() - started < 2
    release.set()
    await _drain(httpserver)
    assert info.value.timeout == 0.15
    assert isinstance(info.value, LLMError)


@pytest.mark.asyncio
async def test_ollama_stream_stalling_between_chunks_raises_timeout(
    httpserver: HTTPServer,
) -> None:
    release = threading.Event()

    def stalling() -> Iterator[bytes]:
        yield (json.dumps({"message": {"content": "a"}, "done": False}) + "\n").encode()
        release.wait(5)
        yield (json.dumps({"message": {"content": "b"}, "done": True}) + "\n").encode()

    httpserver.expect_request("/api/chat").respond_with_handler(
        lambda request: Response(stalling(), mimetype="application/x-ndjson")
    )
    received: list[str] = []
    async with OllamaChat(httpserver.url_for("/"), "qwen") as model:
        with pytest.raises(LLMTimeout):
            async for chunk in model.stream(MESSAGES, timeout=0.15):
                received.append(chunk)
    release.set()
    await _drain(httpserver)
    assert received == ["a"]


@pytest.mark.asyncio
async def test_connection_refused_raises_llm_error_naming_the_server() -> None:
    base_url = f"http://127.0.0.1:{_free_port()}"
    async with OllamaChat(base_url, "qwen") as model:
        with pytest.raises(LLMError, match="cannot connect to ollama at http://127.0.0.1:"):
            await model.complete_json(MESSAGES, SCHEMA, timeout=2)
        with pytest.raises(LLMError, match="cannot connect"):
            await _collect(model, seconds=2)
    async with OpenAIChat(base_url, "m") as openai_model:
        with pytest.raises(LLMError, match="cannot connect to openai"):
            await openai_model.complete_json(MESSAGES, SCHEMA, timeout=2)


@pytest.mark.asyncio
async def test_message_contents_are_never_logged(
    httpserver: HTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    httpserver.expect_request("/api/chat").respond_with_json(
        {"message": {"content": REPLY}, "done": True}
    )
    caplog.set_level(logging.DEBUG)
    async with OllamaChat(httpserver.url_for("/"), "qwen") as model:
        await model.complete_json(MESSAGES, SCHEMA, timeout=5)
    assert "POST" in caplog.text  # something was logged...
    assert "férias" not in caplog.text  # ...but neither the question nor the reply
    assert "Rewrite the question" not in caplog.text


@pytest.mark.asyncio
async def test_borrowed_client_is_reused_and_left_open(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/chat").respond_with_json(
        {"message": {"content": REPLY}, "done": True}
    )
    async with httpx.AsyncClient() as client:
        model = OllamaChat(httpserver.url_for("/"), "qwen", client=client)
        await model.complete_json(MESSAGES, SCHEMA, timeout=5)
        await model.complete_json(MESSAGES, SCHEMA, timeout=5)
        await model.aclose()
        assert not client.is_closed
    assert len(httpserver.log) == 2


# --- OpenAI-compatible ----------------------------------------------------------------------


def _completion(content: str | None) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_openai_posts_json_schema_with_or_without_v1_in_base_url(
    httpserver: HTTPServer, suffix: str
) -> None:
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        _completion(REPLY)
    )
    base_url = httpserver.url_for("/").rstrip("/") + suffix
    async with OpenAIChat(base_url, "llama-3.2-3b") as model:
        assert await model.complete_json(MESSAGES, SCHEMA, timeout=5) == REPLY
    (body,) = _bodies(httpserver)
    assert body["model"] == "llama-3.2-3b"
    assert body["temperature"] == 0
    assert body["messages"][1] == {"role": "user", "content": "Quanto tempo de férias eu tenho?"}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "rewrite", "schema": SCHEMA, "strict": True},
    }
    (request, _) = httpserver.log[0]
    assert "Authorization" not in request.headers


@pytest.mark.asyncio
async def test_openai_sends_bearer_token_when_given_a_key(httpserver: HTTPServer) -> None:
    httpserver.expect_request(
        "/v1/chat/completions", headers={"Authorization": "Bearer sk-test"}
    ).respond_with_json(_completion(REPLY))
    async with OpenAIChat(httpserver.url_for("/"), "gpt", api_key="sk-test") as model:
        assert await model.complete_json(MESSAGES, SCHEMA, timeout=5) == REPLY


def _refuse_json_schema(status: int, error: str) -> Any:
    def handler(request: Request) -> Response:
        body = json.loads(request.get_data())
        if body["response_format"]["type"] == "json_schema":
            return Response(json.dumps({"error": {"message": error}}), status=status)
        return Response(json.dumps(_completion(REPLY)), mimetype="application/json")

    return handler


@pytest.mark.asyncio
async def test_openai_falls_back_to_json_object_after_400_and_sticks(
    httpserver: HTTPServer,
) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(
        _refuse_json_schema(400, "Unknown parameter")
    )
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        assert await model.complete_json(MESSAGES, SCHEMA, timeout=5) == REPLY
        assert model.use_json_object
        assert await model.complete_json(MESSAGES, SCHEMA, timeout=5) == REPLY
    formats = [body["response_format"] for body in _bodies(httpserver)]
    assert [f["type"] for f in formats] == ["json_schema", "json_object", "json_object"]
    assert formats[1] == {"type": "json_object", "schema": SCHEMA}
    assert all(body["temperature"] == 0 for body in _bodies(httpserver))


@pytest.mark.asyncio
async def test_openai_falls_back_when_error_body_mentions_response_format(
    httpserver: HTTPServer,
) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_handler(
        _refuse_json_schema(500, "response_format json_schema is not supported")
    )
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        assert await model.complete_json(MESSAGES, SCHEMA, timeout=5) == REPLY
    assert len(httpserver.log) == 2


@pytest.mark.asyncio
async def test_openai_retries_only_once_and_does_not_stick_when_retry_fails(
    httpserver: HTTPServer,
) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "context length exceeded"}}, status=400
    )
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        with pytest.raises(LLMHTTPError) as info:
            await model.complete_json(MESSAGES, SCHEMA, timeout=5)
        assert not model.use_json_object
    assert info.value.status == 400
    assert "context length" in str(info.value)
    assert len(httpserver.log) == 2


@pytest.mark.asyncio
async def test_openai_500_raises_http_error_without_retry(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_data("boom", status=500)
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        with pytest.raises(LLMHTTPError) as info:
            await model.complete_json(MESSAGES, SCHEMA, timeout=5)
    assert info.value.status == 500
    assert len(httpserver.log) == 1


@pytest.mark.asyncio
async def test_openai_null_content_raises_protocol_error(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_json(_completion(None))
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        with pytest.raises(LLMProtocolError):
            await model.complete_json(MESSAGES, SCHEMA, timeout=5)


@pytest.mark.asyncio
async def test_openai_slow_server_raises_timeout(httpserver: HTTPServer) -> None:
    release = threading.Event()

    def slow(request: Request) -> Response:
        release.wait(5)
        return Response(json.dumps(_completion(REPLY)), mimetype="application/json")

    httpserver.expect_request("/v1/chat/completions").respond_with_handler(slow)
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        with pytest.raises(LLMTimeout):
            await model.complete_json(MESSAGES, SCHEMA, timeout=0.15)
    release.set()
    await _drain(httpserver)


def _sse(*events: dict[str, Any] | str) -> str:
    lines = [": keep-alive", ""]
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        lines += [f"data: {data}", ""]
    return "\n".join(lines) + "\n"


def _delta(content: str | None, finish: str | None = None) -> dict[str, Any]:
    delta = {"role": "assistant"} if content is None else {"content": content}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.mark.asyncio
async def test_openai_stream_parses_sse_until_done(httpserver: HTTPServer) -> None:
    body = _sse(
        _delta(None),
        _delta("Você tem "),
        _delta("30 dias"),
        _delta("", finish="stop"),
        {"choices": [], "usage": {"total_tokens": 9}},
        "[DONE]",
        _delta("after done"),
    )
    httpserver.expect_request("/v1/chat/completions").respond_with_data(
        body, content_type="text/event-stream"
    )
    async with OpenAIChat(httpserver.url_for("/v1"), "m", api_key="k") as model:
        assert await _collect(model) == ["Você tem ", "30 dias"]
    (sent,) = _bodies(httpserver)
    assert sent["stream"] is True
    assert sent["temperature"] == 0
    (request, _) = httpserver.log[0]
    assert request.headers["Authorization"] == "Bearer k"


@pytest.mark.asyncio
async def test_openai_stream_without_done_after_finish_reason_is_accepted(
    httpserver: HTTPServer,
) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_data(
        _sse(_delta("ok"), _delta(None, finish="stop")), content_type="text/event-stream"
    )
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        assert await _collect(model) == ["ok"]


@pytest.mark.asyncio
async def test_openai_stream_cut_short_raises_protocol_error(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_data(
        _sse(_delta("partial")), content_type="text/event-stream"
    )
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        with pytest.raises(LLMProtocolError, match=r"\[DONE\]"):
            await _collect(model)


@pytest.mark.asyncio
async def test_openai_stream_http_error_raises_before_any_chunk(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "overloaded"}}, status=503
    )
    async with OpenAIChat(httpserver.url_for("/"), "m") as model:
        with pytest.raises(LLMHTTPError) as info:
            await _collect(model)
    assert info.value.status == 503
    assert info.value.detail == "overloaded"


# --- Fake -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_fake_chat_replays_script_and_records_calls() -> None:
    fake = FakeChat(replies=[REPLY, LLMTimeout(1.0)], streams=[["a", "b"]], name="scripted")
    model: ChatModel = fake
    assert await model.complete_json(MESSAGES, SCHEMA, timeout=3) == REPLY
    with pytest.raises(LLMTimeout):
        await model.complete_json(MESSAGES, SCHEMA, timeout=3)
    assert await _collect(model, seconds=4) == ["a", "b"]
    assert [(c.kind, c.timeout) for c in fake.calls] == [
        ("complete_json", 3),
        ("complete_json", 3),
        ("stream", 4),
    ]
    assert fake.calls[0].messages == tuple(MESSAGES)
    assert fake.calls[0].schema == SCHEMA
    assert model.name == "scripted"


@pytest.mark.asyncio
async def test_fake_chat_fails_loudly_when_out_of_script() -> None:
    fake = FakeChat()
    with pytest.raises(FakeChatExhausted):
        await fake.complete_json(MESSAGES, SCHEMA, timeout=1)
    with pytest.raises(FakeChatExhausted):
        await _collect(fake)
