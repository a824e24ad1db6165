"""A chat model for the browser tests' second server: it streams a long answer slowly.

Loaded by daphne through `CHATRAG_LLM_BACKEND=tests.browser.slow_model.SlowChat`, so a
browser can reliably reload or press Stop while an answer is being written.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from retrieval.pipeline.llm import ChatMessage, LLMError

PIECES = 400
PIECE_DELAY_S = 0.15


class SlowChat:
    name = "slow-fake"

    def __init__(self, base_url: str = "", model: str = "", api_key: str | None = None) -> None:
        self.model = model

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol
    ) -> str:
        # Rewriting falls back to the rules, exactly as with a model server that fails.
        raise LLMError("slow fake model does not rewrite")

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        timeout: float,  # noqa: ASYNC109 - part of the protocol
    ) -> AsyncIterator[str]:
        for number in range(PIECES):
            await asyncio.sleep(PIECE_DELAY_S)
            yield f"palavra{number} " + ("[1] " if number % 10 == 9 else "")
