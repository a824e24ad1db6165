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
                # Feature names and weights only: no document's words.
                "features": [[name, value] for name, value in line.features],
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


@dataclass
class _Reply:
    """The answer as it is being shown: what `on_piece` was given, and how it ends."""

    passages: list[Passage]
    on_piece: OnPiece | None
    shown: str = ""

    async def send(self, piece: str) -> None:
        self.shown += piece
        if self.on_piece is not None:
            await self.on_piece(piece)

    def done(
        self,
        text: str,
        kind: AnswerKind,
        *,
        stopped: bool = False,
        error: str = "",
        built: ExtractiveAnswer | None = None,
    ) -> Answer:
        # `text` is unmasked already (each piece as it was shown, the extractive answer whole).
        final, _cited = clean_citations(text, len(self.passages))
        return Answer(
            final,
            kind,
            stopped=stopped,
            error=error,
            lines=built.lines if built else (),
            coverage=built.coverage if built else None,
            not_found=built.not_found if built else kind == "nothing",
        )


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
    reply = _Reply(passages_from_hits(outcome.passages, outcome.line_vectors), on_piece)
    if not reply.passages:
        text = label("nothing", language)
        await reply.send(text)
        return reply.done(text, "nothing")
    prefix = error = ""
    if model is not None:
        answered, error = await _model_answer(
            reply,
            outcome,
            model,
            language=language,
            today=today,
            model_timeout=model_timeout,
            stop=stop,
        )
        if answered is not None:
            return answered
        # No usable model output: fall back to the extractive answer, saying why.
        rejected = error.startswith(_REPLACED)
        prefix = label("model_rejected" if rejected else "model_failed", language) + "\n\n"
    built = await _line_choice(outcome, language, lexicon)
    body = not_found_text(reply.passages, language) if built.not_found else built.text
    # The "no model" label is the page's badge (`extractive`), not the answer's first line.
    text = outcome.masker.unmask(prefix + body)
    return await _send_extractive(reply, text, built, error=error, stop=stop)


_REPLACED = "the model's answer was replaced"


async def _model_answer(
    reply: _Reply,
    outcome: RetrievalOutcome,
    model: ChatModel,
    *,
    language: str,
    today: date,
    model_timeout: float,
    stop: asyncio.Event,
) -> tuple[Answer | None, str]:
    """The model's grounded answer, streamed as it comes (unmasked); (None, why) when it has
    none the turn can use: it failed before writing, wrote nothing, or wrote one the check
    rejects (`answer.check`)."""
    messages = build_answer_messages(
        question=outcome.masked_question,
        passages=reply.passages,
        history=outcome.masked_window,
        today=today,
        language=language,
    )
    try:
        pending = ""  # a placeholder like "[EMAIL_1]" may arrive split over pieces
        async for raw in _until_stopped(model.stream(messages, timeout=model_timeout), stop):
            if stop.is_set():
                return reply.done(reply.shown, "model", stopped=True), ""
            ready, pending = split_unfinished_placeholder(pending + raw)
            if ready:
                await reply.send(outcome.masker.unmask(ready))
        if stop.is_set():
            return reply.done(reply.shown, "model", stopped=True), ""
        if pending:
            await reply.send(outcome.masker.unmask(pending))
    except LLMError as exc:
        error = f"model failed: {exc}"
        if not reply.shown.strip():
            return None, error
        await reply.send("\n\n(" + label("model_cut", language) + ")")
        return reply.done(reply.shown, "model", error=error), error
    if not reply.shown.strip():
        return None, "the model returned an empty answer"
    problem = model_answer_problem(
        reply.shown, passage_count=len(reply.passages), language=language
    )
    if problem is None:
        return reply.done(reply.shown, "model"), ""
    return None, f"{_REPLACED}: {problem}"


async def _line_choice(
    outcome: RetrievalOutcome, language: str, lexicon: Lexicon | None
) -> ExtractiveAnswer:
    """The extractive answer's lines. They may come from other found sections of the shown
    documents, citing their card."""
    context = context_passages(outcome.passages, outcome.merged, line_vectors=outcome.line_vectors)
    view = None
    if lexicon is not None:
        view = await lexicon({t.norm for p in context for t in token_spans(p.text)})
    # Off the event loop: the line choice is the answer step's CPU-bound work.
    return await asyncio.to_thread(
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
        query_vectors=outcome.query_vectors,
    )


async def _send_extractive(
    reply: _Reply, text: str, built: ExtractiveAnswer, *, error: str, stop: asyncio.Event
) -> Answer:
    """Show the extractive answer in pieces, as a model's would stream (whole without
    `on_piece`), until the user stops it."""
    if reply.on_piece is None:
        return reply.done(text, "extractive", error=error, built=built)
    for start in range(0, len(text), EXTRACTIVE_PIECE):
        if stop.is_set():
            return reply.done(text[:start], "extractive", stopped=True, error=error, built=built)
        await reply.send(text[start : start + EXTRACTIVE_PIECE])
        await asyncio.sleep(0)
    return reply.done(text, "extractive", error=error, built=built)


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
