"""The optional model stages of a retrieval: HyDE before the search, a rerank after fusion.

Both are off unless switched on (`CHATRAG_HYDE`, `CHATRAG_RERANK`, `evaluate --stages`,
`ask --hyde/--rerank`), need a model server, and are kept only where `evaluate` shows they
win. Each returns a record of what it did for the trace (its status, why, its latency and,
for the rerank, the order before and after) and never raises: a model that fails, times out
or answers garbage leaves the turn as it would have been without the stage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .fusion import MergedHit
from .hyde import (
    HydeParseError,
    about_the_question,
    build_hyde_messages,
    hyde_schema,
    parse_hyde_output,
)
from .llm import ChatModel, LLMError, LLMHTTPError, LLMTimeout
from .rerank import (
    apply_rerank,
    build_rerank_messages,
    parse_rerank_output,
    rerank_schema,
    rerank_window,
)
from .types import SearchQuery

logger = logging.getLogger(__name__)

StageStatus = Literal["done", "kept", "skipped", "failed"]


@dataclass(frozen=True)
class RerankSettings:
    """A listwise rerank of the best `candidates` fused passages, each cut to `passage_chars`."""

    candidates: int = 10
    passage_chars: int = 300
    timeout: float = 8.0


@dataclass(frozen=True)
class HydeSettings:
    """A hypothetical answer of at most `max_chars` characters, searched on the vector leg."""

    max_chars: int = 300
    timeout: float = 8.0


@dataclass
class RerankRecord:
    """What the rerank did: "done" (the model's order), "kept" (fused order), "skipped"."""

    status: StageStatus
    reason: str = ""
    model: str = ""
    ms: float = 0.0
    before: list[int] = field(default_factory=list)  # chunk ids of the window, fused order
    after: list[int] = field(default_factory=list)  # the same chunks, in the final order
    ranked: int = 0  # how many the model placed itself

    def note(self) -> str:
        """One line for the [rewrite] block: positions only (no title, no document id)."""
        if self.status == "done":
            moved = [self.before.index(c) + 1 for c in self.after]
            head = ", ".join(f"#{p}" for p in moved[:5]) + ("…" if len(moved) > 5 else "")
            size = len(self.before)
            text = f"rerank: {self.model} ordered the top {size} ({head} of the fused order)"
        elif self.status == "kept":
            text = f"rerank: fused order kept ({self.reason})"
        else:
            text = f"rerank: skipped ({self.reason})"
        extra = f"; {self.reason}" if self.status == "done" and self.reason else ""
        timing = f" in {self.ms:.0f} ms" if self.status != "skipped" else ""
        return text + extra + timing

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "model": self.model,
            "ms": self.ms,
            "before": list(self.before),
            "after": list(self.after),
            "ranked": self.ranked,
        }


@dataclass
class HydeRecord:
    """What HyDE did: "done" (a hypothesis searched), "failed", "skipped"."""

    status: StageStatus
    reason: str = ""
    model: str = ""
    ms: float = 0.0

    def note(self) -> str:
        """One line for the [rewrite] block (the hypothesis itself is the "hyde" query)."""
        if self.status == "done":
            return (
                f"hyde: {self.model} wrote a hypothetical answer, searched on the vector leg "
                f"(a hypothesis, never a source) in {self.ms:.0f} ms"
            )
        if self.status == "failed":
            return f"hyde: no hypothesis searched ({self.reason}) in {self.ms:.0f} ms"
        return f"hyde: skipped ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "model": self.model, "ms": self.ms}


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


def _failure(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, LLMTimeout | TimeoutError):
        return f"model timed out after {timeout:.1f}s"
    if isinstance(exc, LLMHTTPError):
        return f"model answered http {exc.status}"
    if isinstance(exc, LLMError):
        return f"model failed: {exc}"
    return f"model failed: {type(exc).__name__}"


async def hyde_stage(
    *,
    question: str,
    queries: Sequence[SearchQuery],
    language: str | None,
    model: ChatModel,
    settings: HydeSettings,
    weight: float,
) -> tuple[SearchQuery | None, HydeRecord]:
    """A "hyde" query for the (masked) question and its rewritten queries, or None and why."""
    meanings = [q.text for q in queries if q.type not in {"original", "hyde"}]
    messages = build_hyde_messages(
        question=question, meanings=meanings, language=language, max_chars=settings.max_chars
    )
    started = time.perf_counter()
    try:
        async with asyncio.timeout(settings.timeout):
            raw = await model.complete_json(
                messages, hyde_schema(settings.max_chars), timeout=settings.timeout
            )
        passage = parse_hyde_output(raw, settings.max_chars)
        if not about_the_question(passage, question=question, meanings=meanings, language=language):
            raise HydeParseError("the passage shares no word with the question")
    except HydeParseError as exc:
        return None, HydeRecord("failed", f"unusable reply: {exc}", model.name, _ms(started))
    except Exception as exc:  # any model failure: the turn searches without a hypothesis
        if not isinstance(exc, LLMError | TimeoutError):
            logger.exception("hyde with %s failed unexpectedly", model.name)
        reason = _failure(exc, settings.timeout)
        return None, HydeRecord("failed", reason, model.name, _ms(started))
    query = SearchQuery(passage, "hyde", weight=weight)
    return query, HydeRecord("done", "", model.name, _ms(started))


async def rerank_stage(
    *,
    question: str,
    queries: Sequence[SearchQuery],
    merged: Sequence[MergedHit],
    model: ChatModel,
    settings: RerankSettings,
) -> tuple[list[MergedHit], RerankRecord]:
    """`merged` with its best candidates in the model's order, or as it was and why."""
    window = rerank_window(merged, settings.candidates)
    before = [m.hit.chunk_id for m in window]
    if len(window) < 2:
        return list(merged), RerankRecord("skipped", "fewer than two candidates", model.name)
    meanings = [q.text for q in queries if q.type not in {"original", "hyde"}]
    messages = build_rerank_messages(
        question=question, meanings=meanings, window=window, passage_chars=settings.passage_chars
    )
    started = time.perf_counter()
    try:
        async with asyncio.timeout(settings.timeout):
            raw = await model.complete_json(
                messages, rerank_schema(len(window)), timeout=settings.timeout
            )
    except Exception as exc:  # any model failure: the fused order stands
        if not isinstance(exc, LLMError | TimeoutError):
            logger.exception("rerank with %s failed unexpectedly", model.name)
        reason = _failure(exc, settings.timeout)
        record = RerankRecord("kept", reason, model.name, _ms(started), before, before)
        return list(merged), record
    reading = parse_rerank_output(raw, len(window))
    ranked = apply_rerank(merged, reading.order)
    after = [m.hit.chunk_id for m in ranked[: len(window)]]
    status: StageStatus = "done" if reading.ranked else "kept"
    reason = "; ".join(reading.notes)
    record = RerankRecord(status, reason, model.name, _ms(started), before, after, reading.ranked)
    return ranked, record
