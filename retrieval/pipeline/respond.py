"""A turn's answer step, in one place for the chat and the evaluation (pure: no Django).

The model's grounded answer when there is a model; else, or when it fails, the extractive
one. `on_piece` receives the answer as the user sees it (unmasked) while it is written: the
chat streams it, the evaluation and `manage.py ask` pass nothing and read the result.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from .answer import (
    ChosenLine,
    ExtractiveAnswer,
    Passage,
    build_answer_messages,
    clean_citations,
    context_passages,
    extractive_choice,
    label,
    passages_from_hits,
    query_rankings,
)
from .answer.check import model_answer_problem
from .llm import ChatModel, LLMError
from .masking import split_unfinished_placeholder
from .retrieve import RetrievalOutcome
from .text import token_spans
from .types import LexiconView

# The extractive answer streams in pieces this long, so the page behaves the same with or
# without a model.
EXTRACTIVE_PIECE = 48

AnswerKind = Literal["model", "extractive", "nothing"]
OnPiece = Callable[[str], Awaitable[None]]
# Corpus statistics for the extractive answer's words (rarity from the whole collection
# instead of the passages); None when they cannot be had.
Lexicon = Callable[[set[str]], Awaitable[LexiconView | None]]


@dataclass(frozen=True)
class Answer:
    """What the turn answers."""

    text: str  # as shown: unmasked, citations of no passage dropped
    kind: AnswerKind
    stopped: bool = False  # the user stopped it: `text` is what they saw
    error: str = ""  # why the model's answer was not used, or was cut short
    # The extractive answer's lines with their scores ("why this line"), the share of the
    # question they cover, and whether it said the pages found don't hold the answer.
    lines: tuple[ChosenLine, ...] = ()
    coverage: float | None = None
    not_found: bool = False

    def why(self, *, with_text: bool = True) -> dict[str, Any]:
        """Who wrote the answer and, for the extractive one, why its lines: each line's card,
        document, section, score, page rank and the searched words it says; the coverage and
        whether it said the pages don't hold it. `with_text=False` leaves out the lines' and
        sections' words (a turn's stored trace: staff read it by their own permissions)."""
        lines = []
        for line in self.lines:
            item: dict[str, Any] = {
                "n": line.number,
                "score": line.score,
                "document": line.document,
                "page_rank": line.page_rank,
                "says": list(line.says),
            }
            if with_text:
                item |= {"section": line.heading, "text": line.text}
            lines.append(item)
        return {
            "kind": self.kind,
            "not_found": self.not_found,
            "coverage": self.coverage,
            "lines": lines,
        }


async def answer_turn(
    *,
    outcome: RetrievalOutcome,
    language: str,
    model: ChatModel | None,
    today: date,
    model_timeout: float,
    on_piece: OnPiece | None = None,
    stop: asyncio.Event | None = None,
    lexicon: Lexicon | None = None,
) -> Answer:
    """Answer the retrieved turn, sending its pieces to `on_piece` as they are written."""
    stop = stop if stop is not None else asyncio.Event()
    passages = passages_from_hits(outcome.passages)
    shown = ""  # what `on_piece` has been given

    async def send(piece: str) -> None:
        nonlocal shown
        shown += piece
        if on_piece is not None:
            await on_piece(piece)

    def done(
        text: str,
        kind: AnswerKind,
        *,
        stopped: bool = False,
        error: str = "",
        built: ExtractiveAnswer | None = None,
    ) -> Answer:
        # `text` is unmasked already (each piece as it was shown, the extractive answer whole).
        final, _cited = clean_citations(text, len(passages))
        return Answer(
            final,
            kind,
            stopped=stopped,
            error=error,
            lines=built.lines if built else (),
            coverage=built.coverage if built else None,
            not_found=built.not_found if built else kind == "nothing",
        )

    if not passages:
        text = label("nothing", language)
        await send(text)
        return done(text, "nothing")

    prefix = error = ""
    if model is not None:
        messages = build_answer_messages(
            question=outcome.masked_question,
            passages=passages,
            history=outcome.masked_window,
            today=today,
            language=language,
        )
        try:
            pending = ""  # a placeholder like "[EMAIL_1]" may arrive split over pieces
            async for raw in _until_stopped(model.stream(messages, timeout=model_timeout), stop):
                if stop.is_set():
                    return done(shown, "model", stopped=True)
                ready, pending = split_unfinished_placeholder(pending + raw)
                if ready:
                    await send(outcome.masker.unmask(ready))
            if stop.is_set():
                return done(shown, "model", stopped=True)
            if pending:
                await send(outcome.masker.unmask(pending))
            if shown.strip():
                problem = model_answer_problem(
                    shown, passage_count=len(passages), language=language
                )
                if problem is None:
                    return done(shown, "model")
                error = f"the model's answer was replaced: {problem}"
            else:
                error = "the model returned an empty answer"
        except LLMError as exc:
            error = f"model failed: {exc}"
            if shown.strip():
                note = "\n\n(" + label("model_cut", language) + ")"
                await send(note)
                return done(shown, "model", error=error)
        # No usable model output: fall back to the extractive answer, saying why.
        rejected = error.startswith("the model's answer was replaced")
        prefix = label("model_rejected" if rejected else "model_failed", language) + "\n\n"

    # The "no model" label is the page's badge (`extractive`), not the answer's first line.
    # Lines may come from other found sections of the shown documents, citing their card.
    context = context_passages(outcome.passages, outcome.merged)
    view = None
    if lexicon is not None:
        view = await lexicon({t.norm for p in context for t in token_spans(p.text)})
    # Off the event loop: the line choice is the answer step's CPU-bound work.
    built = await asyncio.to_thread(
        extractive_choice,
        question=outcome.masked_question,
        # A hypothetical answer (HyDE) is the model's guess: its words never choose a line.
        queries=[q.text for q in outcome.queries if q.type != "hyde"],
        passages=context,
        language=language,
        rewrite=outcome.rewrite,
        df=view.df if view else None,
        n_chunks=view.n_chunks if view else 0,
        rankings=query_rankings(outcome.queries, outcome.merged),
        history=outcome.masked_window,
        lead=outcome.pinned,
    )
    body = not_found_text(passages, language) if built.not_found else built.text
    text = outcome.masker.unmask(prefix + body)
    if on_piece is None:
        return done(text, "extractive", error=error, built=built)
    for start in range(0, len(text), EXTRACTIVE_PIECE):
        if stop.is_set():
            return done(text[:start], "extractive", stopped=True, error=error, built=built)
        await send(text[start : start + EXTRACTIVE_PIECE])
        await asyncio.sleep(0)
    return done(text, "extractive", error=error, built=built)


CLOSEST_PAGES = 3  # the pages a "not found" answer offers


def not_found_text(passages: Sequence[Passage], language: str) -> str:
    """Say plainly that the pages found don't hold the answer; offer the closest ones."""
    seen: dict[str, Passage] = {}
    for passage in passages:
        seen.setdefault(passage.document or passage.title, passage)
    closest = list(seen.values())[:CLOSEST_PAGES]
    items = "\n".join(f"- {p.title or p.heading} [{p.number}]" for p in closest)
    return f"{label('not_found', language)}\n\n{items}"


async def _until_stopped(pieces: AsyncIterator[str], stop: asyncio.Event) -> AsyncIterator[str]:
    """Yield the model's pieces until the user stops, without waiting for a stalled model."""
    stopped = asyncio.ensure_future(stop.wait())
    following: asyncio.Future[str] | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(pieces))
            await asyncio.wait({following, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                return
            try:
                piece = following.result()
            except StopAsyncIteration:
                return
            yield piece
    finally:
        stopped.cancel()
        if following is not None and not following.done():
            following.cancel()  # closes the model's HTTP response
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, LLMError):
                await following
