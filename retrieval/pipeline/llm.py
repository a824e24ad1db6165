"""Chat model backends (Ollama, OpenAI-compatible) behind one small Protocol.

Tests script replies with `tests.fakes.FakeChat`; nothing here is a fake.

Decisions:
- One `httpx.AsyncClient` per backend instance, reused across calls; a client passed in is
  borrowed and never closed by us (`retrieval.backends.http`, shared with the embedders).
- Message contents are never logged, not even at debug level: they hold user questions.
- `complete_json` enforces `timeout` as a deadline for the whole call; `stream` applies it to
  connecting and to each wait for the next chunk, since a long answer may legitimately take
  longer than any single gap between deltas.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self

import httpx

from retrieval.backends.http import (
    AsyncHTTP,
    HTTPFailure,
    check_status,
    error_detail,
    json_body,
    v1_url,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatMessage:
    """One message sent to a chat model."""

    role: Literal["system", "user", "assistant"]
    content: str


class ChatModel(Protocol):
    """What the pipeline needs from a chat model."""

    name: str

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol; enforced as a deadline
    ) -> str:
        """Return the raw text of a reply constrained to `schema` (the caller parses it)."""
        ...

    def stream(self, messages: Sequence[ChatMessage], *, timeout: float) -> AsyncIterator[str]:
        """Yield the text deltas of a free-text reply."""
        ...


class LLMError(Exception):
    """A chat model call failed."""


class LLMTimeout(LLMError):
    """A chat model call took longer than its timeout."""

    def __init__(self, timeout: float, backend: str = "llm") -> None:
        super().__init__(f"{backend} timed out after {timeout:.1f}s")
        self.timeout = timeout


class LLMHTTPError(LLMError):
    """A chat model server answered with a non-2xx status."""

    def __init__(self, status: int, detail: str = "", backend: str = "llm") -> None:
        message = f"{backend} answered http {status}"
        if detail:
            message += f": {detail}"
        super().__init__(message)
        self.status = status
        self.detail = detail


class LLMProtocolError(LLMError):
    """A chat model server answered something that does not follow its protocol."""


def _messages_payload(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


class _HTTPBackend:
    """What both HTTP chat backends add to the shared plumbing (`retrieval.backends.http`):
    their errors worded as `LLMError`s, and a log line per call without its contents."""

    backend = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._http = AsyncHTTP(base_url, api_key, client)
        self.base_url = self._http.base_url
        self.model = model
        self.name = model

    async def aclose(self) -> None:
        """Close the HTTP client if this backend created it."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @contextmanager
    def _llm_errors(self, timeout: float = 0.0) -> Iterator[None]:
        """Word the plumbing's failures as LLMError subclasses."""
        try:
            yield
        except HTTPFailure as failure:
            raise self._error(failure, timeout) from failure.cause

    def _error(self, failure: HTTPFailure, timeout: float) -> LLMError:
        backend, url = self.backend, failure.url
        match failure.kind:
            case "timeout":
                return LLMTimeout(timeout, backend)
            case "connect":
                return LLMError(
                    f"cannot connect to {backend} at {url} (is it running?): {failure.cause}"
                )
            case "status":
                return LLMHTTPError(failure.status or 0, failure.detail, backend)
            case "json":
                return LLMProtocolError(f"{backend} answered a body that is not JSON")
            case _:
                return LLMError(f"{backend} request to {url} failed: {failure.cause!r}")

    async def _post_json(self, url: str, payload: dict[str, Any], seconds: float) -> httpx.Response:
        """POST `payload` within `seconds` and return the response, whatever its status."""
        started = time.monotonic()
        with self._llm_errors(seconds):
            response = await self._http.post(url, payload, seconds)
        logger.debug(
            "%s POST %s model=%s status=%s bytes=%d elapsed=%.2fs",
            self.backend,
            url,
            self.model,
            response.status_code,
            len(response.content),
            time.monotonic() - started,
        )
        return response

    def _raise_for_status(self, response: httpx.Response) -> None:
        with self._llm_errors():
            check_status(response)

    def _json_body(self, response: httpx.Response) -> dict[str, Any]:
        with self._llm_errors():
            data = json_body(response)
        if not isinstance(data, dict):
            raise LLMProtocolError(f"{self.backend} answered JSON that is not an object")
        return data

    async def _stream_lines(
        self, url: str, payload: dict[str, Any], seconds: float
    ) -> AsyncGenerator[str, None]:
        """POST `payload` and yield the body line by line (`seconds` bounds each wait)."""
        with self._llm_errors(seconds):
            async with aclosing(self._http.stream_lines(url, payload, seconds)) as lines:
                async for line in lines:
                    yield line


class OllamaChat(_HTTPBackend):
    """Ollama's native `/api/chat` endpoint."""

    backend = "ollama"

    @property
    def _url(self) -> str:
        return f"{self.base_url}/api/chat"

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol; enforced as a deadline
    ) -> str:
        """Return the raw text of a reply constrained to `schema`."""
        payload = {
            "model": self.model,
            "messages": _messages_payload(messages),
            "stream": False,
            "format": schema,
            "options": {"temperature": 0},
        }
        response = await self._post_json(self._url, payload, timeout)
        self._raise_for_status(response)
        data = self._json_body(response)
        if "error" in data:
            raise LLMProtocolError(f"ollama error: {error_detail(response.content)}")
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise LLMProtocolError("ollama reply has no message.content string")
        return content

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol; bounds each wait
    ) -> AsyncIterator[str]:
        """Yield the text deltas of a reply, parsed from Ollama's NDJSON stream."""
        payload = {
            "model": self.model,
            "messages": _messages_payload(messages),
            "stream": True,
            "options": {"temperature": 0},
        }
        # aclosing: returning at `done` must close the HTTP response now, not at GC.
        async with aclosing(self._stream_lines(self._url, payload, timeout)) as lines:
            async for line in lines:
                if not line.strip():
                    continue
                try:
                    chunk = json.loads(line)
                except ValueError as exc:
                    raise LLMProtocolError("ollama stream line is not JSON") from exc
                if not isinstance(chunk, dict):
                    raise LLMProtocolError("ollama stream line is not a JSON object")
                if "error" in chunk:
                    detail = error_detail(json.dumps(chunk).encode())
                    raise LLMProtocolError(f"ollama stream error: {detail}")
                message = chunk.get("message")
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, str) and content:
                    yield content
                if chunk.get("done") is True:
                    return
        raise LLMProtocolError("ollama stream ended before done")


class OpenAIChat(_HTTPBackend):
    """OpenAI-compatible `/v1/chat/completions` (vLLM, llama.cpp server, LM Studio, OpenAI)."""

    backend = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(base_url, model, api_key, client)
        # Flipped for good once the server refuses `json_schema` and accepts `json_object`.
        self.use_json_object = False

    @property
    def _url(self) -> str:
        return v1_url(self.base_url, "/chat/completions")

    @staticmethod
    def _response_format(schema: dict[str, Any], json_object: bool) -> dict[str, Any]:
        if json_object:
            # llama.cpp and vLLM read `schema` here; OpenAI ignores it and just forces JSON.
            return {"type": "json_object", "schema": schema}
        return {
            "type": "json_schema",
            "json_schema": {"name": "rewrite", "schema": schema, "strict": True},
        }

    @staticmethod
    def _refuses_json_schema(response: httpx.Response) -> bool:
        if response.status_code in (400, 422):
            return True
        if response.is_success:
            return False
        body = response.content.decode("utf-8", errors="replace").lower()
        return "response_format" in body or "json_schema" in body

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol; enforced as a deadline
    ) -> str:
        """Return the raw text of a reply constrained to `schema`.

        Falls back once to `json_object` when the server refuses `json_schema`, and keeps
        using it afterwards so that later calls cost one request.
        """
        deadline = time.monotonic() + timeout
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": _messages_payload(messages),
            "temperature": 0,
            "stream": False,
            "response_format": self._response_format(schema, self.use_json_object),
        }
        response = await self._post_json(self._url, payload, timeout)
        if not self.use_json_object and self._refuses_json_schema(response):
            logger.info(
                "%s refused response_format json_schema (http %s); retrying with json_object",
                self.backend,
                response.status_code,
            )
            payload["response_format"] = self._response_format(schema, True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LLMTimeout(timeout, self.backend)
            response = await self._post_json(self._url, payload, remaining)
            if response.is_success:
                self.use_json_object = True
        self._raise_for_status(response)
        data = self._json_body(response)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMProtocolError("openai reply has no choices[0].message.content") from exc
        if not isinstance(content, str):
            raise LLMProtocolError("openai reply content is not a string")
        return content

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol; bounds each wait
    ) -> AsyncIterator[str]:
        """Yield the text deltas of a reply, parsed from the SSE stream."""
        payload = {
            "model": self.model,
            "messages": _messages_payload(messages),
            "temperature": 0,
            "stream": True,
        }
        finished = False
        async with aclosing(self._stream_lines(self._url, payload, timeout)) as lines:
            async for line in lines:
                if not line.startswith("data:"):
                    continue  # blank separators, `event:` and `:` comment lines
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError as exc:
                    raise LLMProtocolError("openai stream event is not JSON") from exc
                if not isinstance(event, dict):
                    raise LLMProtocolError("openai stream event is not a JSON object")
                if "error" in event:
                    detail = error_detail(json.dumps(event).encode())
                    raise LLMProtocolError(f"openai stream error: {detail}")
                choices = event.get("choices")
                if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
                    continue  # e.g. a final usage-only event
                delta = choices[0].get("delta")
                content = delta.get("content") if isinstance(delta, dict) else None
                if isinstance(content, str) and content:
                    yield content
                if choices[0].get("finish_reason"):
                    finished = True
        # Some older servers close the stream after the finish_reason without [DONE].
        if not finished:
            raise LLMProtocolError("openai stream ended before [DONE]")
