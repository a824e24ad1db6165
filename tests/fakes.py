"""Test doubles of the backends, for tests only: production code never imports them.

`FakeChat` scripts a chat model's replies in-process. The fake embedder that other processes
select by dotted path is `chatrag.dev.fakes.HashingEmbedder`; the fake model *server*, speaking
the providers' wire formats, is `chatrag.dev.fakemodel`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from retrieval.pipeline.fusion import Hit
from retrieval.pipeline.llm import ChatMessage
from retrieval.pipeline.search import Scope, SearchCall, SearchParams, SearchRequest
from retrieval.pipeline.types import LineVector


@dataclass(frozen=True)
class FakeCall:
    """One call recorded by FakeChat."""

    kind: Literal["complete_json", "stream"]
    messages: tuple[ChatMessage, ...]
    schema: dict[str, Any] | None
    timeout: float


class FakeChatExhausted(AssertionError):
    """FakeChat was called more times than it was scripted for."""


class FakeChat:
    """A deterministic chat model for tests and demos: replays scripted replies in order.

    `replies` feed `complete_json`, `streams` (one list of chunks per call) feed `stream`;
    a scripted item that is an exception instance is raised instead. Running out of script
    raises FakeChatExhausted, so an unexpected call fails loudly.
    """

    def __init__(
        self,
        replies: Sequence[str | BaseException] = (),
        streams: Sequence[Sequence[str] | BaseException] = (),
        *,
        name: str = "fake",
    ) -> None:
        self.name = name
        self.replies: list[str | BaseException] = list(replies)
        self.streams: list[Sequence[str] | BaseException] = list(streams)
        self.calls: list[FakeCall] = []

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol
    ) -> str:
        """Return the next scripted reply."""
        self.calls.append(FakeCall("complete_json", tuple(messages), schema, timeout))
        if not self.replies:
            raise FakeChatExhausted("FakeChat.complete_json called with no scripted reply left")
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol; bounds each wait
    ) -> AsyncIterator[str]:
        """Yield the chunks of the next scripted stream."""
        self.calls.append(FakeCall("stream", tuple(messages), None, timeout))
        if not self.streams:
            raise FakeChatExhausted("FakeChat.stream called with no scripted stream left")
        script = self.streams.pop(0)
        if isinstance(script, BaseException):
            raise script
        for chunk in script:
            yield chunk


class FakeSearcher:
    """A `Searcher` whose hits a function of each request decides (no database).

    `found(request)`: the hits of one request; by default none.
    """

    def __init__(self, found: Callable[[SearchRequest], list[Hit]] | None = None) -> None:
        self.found = found or (lambda request: [])
        self.requests: list[SearchRequest] = []

    def search_many(
        self,
        requests: Sequence[SearchRequest],
        scope: Scope,
        params: SearchParams,
        *,
        call: SearchCall | None = None,
    ) -> list[list[Hit]]:
        self.requests += requests
        return [self.found(r) for r in requests]

    def search_while_embedding(
        self,
        requests: Sequence[SearchRequest],
        scope: Scope,
        params: SearchParams,
        embed: Callable[[], Sequence[Sequence[float]]],
        *,
        call: SearchCall | None = None,
    ) -> list[list[Hit]]:
        vectors = embed()
        with_vectors = [replace(r, vector=tuple(v)) for r, v in zip(requests, vectors, strict=True)]
        return self.search_many(with_vectors, scope, params)

    def line_vectors(
        self, chunk_ids: Sequence[int], scope: Scope, *, call: SearchCall | None = None
    ) -> dict[int, tuple[LineVector, ...]]:
        """No stored line vectors (the answer then chooses its lines without them)."""
        return {}
