"""The optional model stages with a scripted model: what each does, and that none breaks a turn.

The wire format is exercised against real HTTP servers in
tests/conversations/quality/test_model_stages_http.py and against llama.cpp in
tests/retrieval/test_local_llamacpp.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from retrieval.pipeline.fusion import Hit, MergedHit
from retrieval.pipeline.llm import ChatMessage, LLMHTTPError, LLMTimeout
from retrieval.pipeline.model_stages import (
    HydeSettings,
    RerankSettings,
    hyde_stage,
    rerank_stage,
)
from retrieval.pipeline.types import SearchQuery
from tests.fakes import FakeChat

pytestmark = pytest.mark.asyncio

QUERIES = [
    SearchQuery("prazo do reembolso de despesas", "expand"),
    SearchQuery("e o prazo?", "original", weight=0.5),
]


def merged(chunk: int) -> MergedHit:
    hit = Hit(chunk, chunk, f"rh/secret-{chunk}", f"Title {chunk}", "", "text", 0, "", 1, 1, 0.03)
    return MergedHit(hit=hit, score=1.0 / chunk)


HITS = [merged(i) for i in range(1, 7)]


async def _rerank(model: Any, settings: RerankSettings | None = None) -> Any:
    return await rerank_stage(
        question="e o prazo?",
        queries=QUERIES,
        merged=HITS,
        model=model,
        settings=settings or RerankSettings(candidates=4),
    )


async def test_rerank_orders_the_window_and_records_before_and_after() -> None:
    model = FakeChat([json.dumps({"order": [3, 1]})], name="m")
    out, record = await _rerank(model)
    assert [m.chunk_id for m in out] == [3, 1, 2, 4, 5, 6]
    assert (record.status, record.ranked, record.model) == ("done", 2, "m")
    assert (record.before, record.after) == ([1, 2, 3, 4], [3, 1, 2, 4])
    assert record.reason == "2 not ranked by the model: kept in fused order after"
    assert record.ms >= 0
    (call,) = model.calls
    assert call.schema is not None
    assert call.schema["properties"]["order"]["maxItems"] == 4  # the window, not all hits
    assert call.timeout == RerankSettings().timeout
    # The note names positions, never a document (a staff member may not read them all).
    note = record.note()
    assert note.startswith("rerank: m ordered the top 4 (#3, #1, #2, #4 of the fused order)")
    assert "secret" not in note and "Title" not in note


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (LLMTimeout(8.0, "openai"), "model timed out after 8.0s"),
        (LLMHTTPError(503, "busy", "openai"), "model answered http 503"),
        (RuntimeError("a bug"), "model failed: RuntimeError"),
    ],
)
async def test_a_failing_model_keeps_the_fused_order_and_says_why(
    failure: BaseException, reason: str
) -> None:
    out, record = await _rerank(FakeChat([failure]))
    assert out == HITS
    assert (record.status, record.reason, record.ranked) == ("kept", reason, 0)
    assert record.before == record.after == [1, 2, 3, 4]
    assert record.note().startswith(f"rerank: fused order kept ({reason}) in ")


async def test_garbage_keeps_the_fused_order() -> None:
    out, record = await _rerank(FakeChat(["Passage two looks best to me."]))
    assert out == HITS
    assert record.status == "kept"
    assert record.reason == "no passage numbers in the reply: fused order kept"


class _Stalled:
    """A model that never answers: only the stage's own deadline ends the wait."""

    name = "stalled"

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        *,
        timeout: float,  # noqa: ASYNC109 - the protocol's; ignored here on purpose
    ) -> str:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    def stream(self, messages: Sequence[ChatMessage], *, timeout: float) -> AsyncIterator[str]:
        raise AssertionError("not used")


async def test_a_model_that_ignores_its_timeout_is_cut_at_the_deadline() -> None:
    out, record = await asyncio.wait_for(
        _rerank(_Stalled(), RerankSettings(candidates=4, timeout=0.05)), 10
    )
    assert out == HITS
    assert (record.status, record.reason) == ("kept", "model timed out after 0.1s")
    query, hyde = await asyncio.wait_for(
        hyde_stage(
            question="e o prazo?",
            queries=QUERIES,
            language="pt",
            model=_Stalled(),
            settings=HydeSettings(timeout=0.05),
            weight=0.7,
        ),
        10,
    )
    assert query is None
    assert (hyde.status, hyde.reason) == ("failed", "model timed out after 0.1s")


async def test_fewer_than_two_candidates_are_not_sent() -> None:
    model = FakeChat([])
    out, record = await rerank_stage(
        question="q", queries=QUERIES, merged=HITS[:1], model=model, settings=RerankSettings()
    )
    assert out == HITS[:1]
    assert (record.status, record.reason) == ("skipped", "fewer than two candidates")
    assert model.calls == []


async def _hyde(reply: str | BaseException) -> Any:
    return await hyde_stage(
        question="e o prazo?",
        queries=QUERIES,
        language="pt",
        model=FakeChat([reply], name="m"),
        settings=HydeSettings(max_chars=200),
        weight=0.7,
    )


async def test_hyde_gives_a_weighted_hyde_query() -> None:
    passage = "O prazo para pedir o reembolso de despesas é de 30 dias após a despesa."
    query, record = await _hyde(json.dumps({"passage": passage}))
    assert query == SearchQuery(passage, "hyde", weight=0.7)
    assert (record.status, record.model) == ("done", "m")
    assert "a hypothesis, never a source" in record.note()


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("no json", "unusable reply: the reply is not JSON"),
        (
            json.dumps({"passage": "O hotel é reservado pela agência de viagens."}),
            "unusable reply: the passage shares no word with the question",
        ),
        (LLMTimeout(8.0), "model timed out after 8.0s"),
    ],
)
async def test_hyde_without_a_usable_passage_searches_nothing_more(
    reply: str | BaseException, reason: str
) -> None:
    query, record = await _hyde(reply)
    assert query is None
    assert (record.status, record.reason) == ("failed", reason)
