"""A fake chat-model server of fixed latency, speaking Ollama's and OpenAI's wire formats.

For the load script (`make load`), the fault tests and local experiments: the app talks to it
exactly as to a real model server, so the HTTP client, the stream parsing and the timeouts
are all exercised. Standard library only (asyncio), so one thread serves many streams.

- `POST /api/chat` (Ollama) and `POST /v1/chat/completions` (OpenAI): a non-streaming call is
  a rewrite and answers the JSON the rewrite schema asks for (the latest question as the one
  query); a streaming call answers a short text citing passage [1], in `pieces` pieces.
- Every call waits `latency` seconds before its first byte; pieces follow `gap` apart.
- `hold()` makes streams stop after their first piece until `release()` (fault tests).

    python -m chatrag.dev.fakemodel --port 11500 --latency 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

ANSWER_WORDS = (
    "Segundo a política da empresa [1], a regra vale para todos os empregados. "
    "Os detalhes e as exceções estão no documento citado [1]."
).split(" ")


@dataclass
class FakeModelConfig:
    latency: float = 0.5  # seconds before the first byte of every call
    gap: float = 0.02  # seconds between streamed pieces
    pieces: int = 20  # streamed pieces per answer


@dataclass
class _Stats:
    rewrites: int = 0
    answers: int = 0
    active_streams: int = 0


def _latest_question(messages: list[dict[str, Any]]) -> str:
    """The question of a rewrite prompt ("Latest question: ...") or of an answer prompt."""
    content = str(messages[-1].get("content", "")) if messages else ""
    for line in content.splitlines():
        if line.startswith("Latest question:"):
            return line.removeprefix("Latest question:").strip()
    if "<question>" in content:
        return content.split("<question>", 1)[1].split("</question>", 1)[0].strip()
    return " ".join(content.split())[:200]


def _answer_pieces(count: int) -> list[str]:
    words = [ANSWER_WORDS[i % len(ANSWER_WORDS)] for i in range(max(count, 1))]
    return [w + " " for w in words[:-1]] + [words[-1]]


class FakeModelServer:
    """The server; `start()` runs it on a thread of its own, `serve()` on the current loop."""

    def __init__(
        self, config: FakeModelConfig | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config or FakeModelConfig()
        self.host = host
        self.port = port
        self.stats = _Stats()
        self._held = threading.Event()
        self._released = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- control (any thread) -------------------------------------------------------------------

    def hold(self) -> None:
        """Streams stop after their first piece until `release()`."""
        self._released.clear()
        self._held.set()

    def release(self) -> None:
        self._held.clear()
        self._released.set()

    def start(self) -> FakeModelServer:
        """Serve on a daemon thread; returns once the port is bound."""
        self._thread = threading.Thread(target=self._run, name="fake-model", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake model server did not start")
        return self

    def stop(self) -> None:
        self.release()
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self.serve())

    async def serve(self, started: Callable[[], Awaitable[None]] | None = None) -> None:
        """Serve until the server is closed."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._ready.set()
        if started is not None:
            await started()
        async with self._server:
            with contextlib.suppress(asyncio.CancelledError):
                await self._server.serve_forever()

    # --- HTTP ---------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: the app's HTTP client reuses connections
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, body = request
                await self._route(method, path, body, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        if method == "GET" and path in {"/", "/healthz", "/api/tags", "/v1/models"}:
            await _respond(writer, 200, {"status": "ok", "models": [{"name": "fake"}]})
            return
        if method != "POST" or path not in {"/api/chat", "/v1/chat/completions"}:
            await _respond(writer, 404, {"error": f"no route {method} {path}"})
            return
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            await _respond(writer, 400, {"error": "body is not JSON"})
            return
        openai = path.startswith("/v1/")
        # Ollama streams unless told otherwise; OpenAI does not unless asked.
        streaming = bool(payload.get("stream", not openai))
        await asyncio.sleep(self.config.latency)
        if not streaming:
            self.stats.rewrites += 1
            await _respond(writer, 200, _rewrite_reply(payload, openai))
            return
        self.stats.answers += 1
        self.stats.active_streams += 1
        try:
            await self._stream(writer, payload, openai)
        finally:
            self.stats.active_streams -= 1

    async def _stream(
        self, writer: asyncio.StreamWriter, payload: dict[str, Any], openai: bool
    ) -> None:
        model = str(payload.get("model", "fake"))
        mimetype = "text/event-stream" if openai else "application/x-ndjson"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: " + mimetype.encode() + b"\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for number, piece in enumerate(_answer_pieces(self.config.pieces)):
            if number:
                await asyncio.sleep(self.config.gap)
            if number == 1 and self._held.is_set():
                await asyncio.to_thread(self._released.wait)
            await _chunk(writer, _stream_line(piece, model, openai, done=False))
        await _chunk(writer, _stream_line("", model, openai, done=True))
        if openai:
            await _chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _rewrite_reply(payload: dict[str, Any], openai: bool) -> dict[str, Any]:
    question = _latest_question(payload.get("messages") or [])
    content = json.dumps(
        {
            "queries": [{"text": question[:300] or "pergunta", "type": "normalize", "area": None}],
            "needs_clarification": False,
            "clarification": None,
        },
        ensure_ascii=False,
    )
    if openai:
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
    model = payload.get("model", "fake")
    return {"model": model, "message": {"role": "assistant", "content": content}, "done": True}


def _stream_line(piece: str, model: str, openai: bool, *, done: bool) -> bytes:
    if openai:
        delta: dict[str, Any] = {} if done else {"content": piece}
        choice = {"index": 0, "delta": delta, "finish_reason": "stop" if done else None}
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"
    message = {"role": "assistant", "content": piece}
    return json.dumps({"model": model, "message": message, "done": done}).encode() + b"\n"


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def _respond(writer: asyncio.StreamWriter, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    await writer.drain()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    """Read one HTTP/1.1 request; None when the client closed the connection."""
    line = await reader.readline()
    if not line:
        return None
    method, target, _version = line.decode("latin-1").split(" ", 2)
    length = 0
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, target.split("?", 1)[0], body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else "")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11500)
    parser.add_argument("--latency", type=float, default=FakeModelConfig.latency)
    parser.add_argument("--gap", type=float, default=FakeModelConfig.gap)
    parser.add_argument("--pieces", type=int, default=FakeModelConfig.pieces)
    args = parser.parse_args(argv)
    server = FakeModelServer(
        FakeModelConfig(latency=args.latency, gap=args.gap, pieces=args.pieces),
        host=args.host,
        port=args.port,
    )

    async def started() -> None:
        print(f"fake model server on {server.url}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve(started))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
