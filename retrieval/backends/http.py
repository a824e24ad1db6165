"""HTTP plumbing shared by the chat model and embedding backends, async and sync.

What both kinds of backend used to repeat lives here once:
- the `/v1` join: an OpenAI-compatible base URL may be given with or without `/v1`;
- headers: JSON, and a bearer token when a key is set;
- client ownership: a client passed in is borrowed and never closed; one made here is closed
  by `close` / `aclose`;
- error mapping: httpx's exceptions, a deadline, a non-2xx status and a body that is not JSON
  all become one `HTTPFailure`, whose `kind` each backend words as its own error
  (`retrieval.pipeline.llm.LLMError`, `retrieval.embeddings.EmbeddingError`), so that their
  callers keep catching what they caught.
Nothing here knows a provider's protocol, the pipeline or Django (an import-linter contract).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import httpx

# How much of an error body may go into an exception message (it is shown in traces).
ERROR_DETAIL_CHARS = 200

FailureKind = Literal["timeout", "connect", "request", "status", "json"]


class HTTPFailure(Exception):
    """A call to a backend's server failed; `kind` says how.

    - "timeout": no answer in time (httpx's timeouts, or the caller's deadline);
    - "connect": nothing listens there;
    - "request": any other transport error;
    - "status": a non-2xx answer (`status`, and `detail` from its body);
    - "json": a 2xx answer whose body is not JSON.
    """

    def __init__(
        self,
        kind: FailureKind,
        url: str,
        *,
        status: int | None = None,
        detail: str = "",
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(f"{kind} failure at {url}" + (f": {cause!r}" if cause else ""))
        self.kind: FailureKind = kind
        self.url = url
        self.status = status
        self.detail = detail
        self.cause = cause


def v1_url(base_url: str, path: str) -> str:
    """`path` under an OpenAI-compatible base URL given with or without `/v1`."""
    base = base_url.rstrip("/")
    return f"{base}{path}" if base.endswith("/v1") else f"{base}/v1{path}"


def headers(api_key: str | None) -> dict[str, str]:
    """The headers of every request: JSON, and the key as a bearer token when there is one."""
    sent = {"Accept": "application/json"}
    if api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    return sent


def error_detail(body: bytes) -> str:
    """A short error message from an error body (JSON `error`, `detail`, `message`, or text)."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            text = err if isinstance(err, str) else json.dumps(err)
    text = " ".join(text.split())
    if len(text) > ERROR_DETAIL_CHARS:
        text = text[:ERROR_DETAIL_CHARS] + "..."
    return text


@contextmanager
def failures(url: str) -> Iterator[None]:
    """Turn httpx's errors, and a deadline's `TimeoutError`, into `HTTPFailure`."""
    try:
        yield
    except (httpx.TimeoutException, TimeoutError) as exc:
        raise HTTPFailure("timeout", url, cause=exc) from exc
    except httpx.ConnectError as exc:
        raise HTTPFailure("connect", url, cause=exc) from exc
    except httpx.HTTPError as exc:
        raise HTTPFailure("request", url, cause=exc) from exc


def check_status(response: httpx.Response, body: bytes | None = None) -> None:
    """Raise a "status" failure unless the answer is 2xx (`body`: a streamed one's, read)."""
    if not response.is_success:
        detail = error_detail(response.content if body is None else body)
        raise HTTPFailure("status", str(response.url), status=response.status_code, detail=detail)


def json_body(response: httpx.Response) -> Any:
    """The answer's JSON, or a "json" failure."""
    try:
        return response.json()
    except ValueError as exc:
        raise HTTPFailure("json", str(response.url), cause=exc) from exc


class AsyncHTTP:
    """An async backend's server: its base URL, key and client (`httpx.AsyncClient`)."""

    def __init__(
        self, base_url: str, api_key: str | None = None, client: httpx.AsyncClient | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = headers(api_key)
        self._owns_client = client is None
        self.client = client if client is not None else httpx.AsyncClient()

    async def aclose(self) -> None:
        """Close the client if it was made here (a borrowed one stays open)."""
        if self._owns_client:
            await self.client.aclose()

    async def post(self, url: str, payload: dict[str, Any], seconds: float) -> httpx.Response:
        """POST `payload` within `seconds` (a deadline for the whole call); any status."""
        with failures(url):
            async with asyncio.timeout(seconds):
                return await self.client.post(
                    url, json=payload, headers=self.headers, timeout=seconds
                )

    async def stream_lines(
        self, url: str, payload: dict[str, Any], seconds: float
    ) -> AsyncGenerator[str, None]:
        """POST `payload` and yield a 2xx body line by line (`seconds` bounds each wait)."""
        with failures(url):
            async with self.client.stream(
                "POST", url, json=payload, headers=self.headers, timeout=seconds
            ) as response:
                if not response.is_success:
                    check_status(response, await response.aread())
                async for line in response.aiter_lines():
                    yield line


class SyncHTTP:
    """A sync backend's server: its base URL, key and client (`httpx.Client`)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float,
        client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = headers(api_key)
        self.timeout = timeout
        self._owns_client = client is None
        self.client = client if client is not None else httpx.Client()

    def close(self) -> None:
        """Close the client if it was made here (a borrowed one stays open)."""
        if self._owns_client:
            self.client.close()

    def post_json(self, url: str, payload: dict[str, Any]) -> Any:
        """POST `payload` and return the 2xx answer's JSON."""
        with failures(url):
            response = self.client.post(
                url, json=payload, headers=self.headers, timeout=self.timeout
            )
        check_status(response)
        return json_body(response)
