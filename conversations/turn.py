"""One chat turn, top to bottom: load -> answer -> store -> emit (`turn_run`).

The user's message is already stored (by the consumer, which then calls `start_turn`). The
turn reads what it needs (`turn_context`), asks the pipeline for its plan
(`retrieval.pipeline.plan.plan_turn`: rewrite, search, decide), then either replies at once
(small talk, a question back) or streams the answer step
(`retrieval.pipeline.respond.answer_turn`). Every write is a service of
`conversations.services`, each in its own transaction; every frame is built by
`conversations.frames`. Frames go out through `emit` in this order: `rewrite`, then
`clarify` or (small talk) `done`; or `sources`, `delta`..., `done`; or `error`.

The turn runs as its own task: a socket that drops does not stop it, the answer is still
stored, and a reload shows it; a stop from any web process reaches it (`conversations.live`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.urls import reverse
from django.utils import timezone

from conversations import frames
from conversations.live import LIVE, REGISTRY, LiveTurn
from conversations.models import Message
from conversations.past import answers_unreadable
from conversations.selectors import history_before
from conversations.services import answer_finish, answer_start, answer_write, turn_fail
from conversations.trace import announced_block, trace_fields, trace_with_timings
from retrieval.models import Collection
from retrieval.pipeline.answer import label
from retrieval.pipeline.plan import TurnBackends, TurnPlan, TurnRequest, plan_turn
from retrieval.pipeline.respond import Answer, answer_turn
from retrieval.pipeline.retrieve import RewriteAnnouncement
from retrieval.pipeline.search import Scope
from retrieval.pipeline.types import HistoryMessage
from retrieval.services import (
    default_collection,
    default_language,
    scope_for_user,
    turn_backends_for,
    turn_request_for,
)

logger = logging.getLogger(__name__)
Emit = Callable[[dict[str, Any]], Awaitable[None]]
T = TypeVar("T")
SAVE_EVERY_S = 0.5
# Waits between tries to store a failure while the database is unreachable (about 30 s in all:
# a restart; beyond that the start-up sweep, `manage.py recover_interrupted`, marks the turn).
RECORD_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)

# The turns this process runs, as tasks (tests and scripts wait for them).
RUNNING: set[asyncio.Task[None]] = set()

# A turn's database calls run on threads of their own, concurrently, each on a pooled
# connection; `database_sync_to_async` alone sends every call of the process, one after the
# other, to a single thread, which under load was the first bottleneck (scripts/load_ws.py).
_DB_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="turn-db")


def in_db_thread(func: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """`database_sync_to_async` on the turns' own threads (the ORM is thread-safe)."""
    return database_sync_to_async(func, thread_sensitive=False, executor=_DB_THREADS)


# --- starting and stopping --------------------------------------------------------------------


def start_turn(*, message_id: int, emit: Emit, received_at: float) -> LiveTurn:
    """Run a turn as an independent task (it outlives the socket that asked for it), which a
    stop from any web process reaches (`conversations.live`)."""
    live = REGISTRY.begin(message_id)
    work = turn_run(message_id=message_id, emit=emit, received_at=received_at)
    task = asyncio.create_task(REGISTRY.serve(message_id, work))
    RUNNING.add(task)
    task.add_done_callback(RUNNING.discard)
    return live


def request_stop(message_id: int) -> bool:
    """Stop a turn this process runs; `conversations.live.stop_request` reaches any process."""
    return REGISTRY.stop_here(message_id)


# --- the turn -----------------------------------------------------------------------------------


async def turn_run(*, message_id: int, emit: Emit, received_at: float | None = None) -> None:
    """Rewrite, search, answer and store one turn, emitting frames as it goes."""
    clock = _Clock(received_at)
    live = LIVE.setdefault(message_id, LiveTurn(user_message_id=message_id))
    emit = _never_raising(emit, message_id)
    turn: TurnContext | None = None
    found: dict[str, Any] | None = None  # the trace's fields, once the search is done
    streaming: Message | None = None  # the answer row while it is being written
    try:
        # Load.
        turn = await _load(message_id)
        question, language = turn.question, turn.language

        async def announce(announced: RewriteAnnouncement) -> None:
            # The user sees what will be searched before the searches run.
            block = announced_block(announced, original=question)
            await emit(frames.rewrite(message_id=message_id, block=block))
            clock.mark("to_rewrite_frame")

        # Answer: rewrite, search and decide; a reply that needs no answer step is stored
        # and sent...
        plan = await _planned_or_stopped(turn, live.stop, announce)
        if plan is None:  # stopped while it searched: the searches are cancelled
            await _stopped_before_answer(turn, clock, emit)
            return
        outcome = plan.outcome
        found = trace_fields(outcome, outcome.errors)
        if plan.kind != "answer":
            await _reply_at_once(turn, plan, found, clock, emit)
            return

        # ... or the answer step, streamed: stored with its sources, then piece by piece.
        cards = frames.source_cards(outcome.passages, document_url=_document_url)
        answer = streaming = await _answer_start(
            question=turn.message, trace=found, status=Message.Status.STREAMING, sources=cards
        )
        live.assistant_message_id = answer.id
        await emit(frames.sources(answer_id=answer.id, reply_to=message_id, cards=cards))
        clock.mark("to_sources_frame")
        result = await answer_turn(
            outcome=outcome,
            language=language,
            model=turn.backends.model,
            today=turn.request.today or timezone.localdate(),
            model_timeout=settings.CHATRAG_LLM_TIMEOUT,
            on_piece=_Stream(answer=answer, live=live, emit=emit, clock=clock).piece,
            stop=live.stop,
        )

        await _answer_stored(turn, answer, result, found, clock, emit)
        streaming = None
    except Exception as exc:  # the user always gets an answer frame, never silence
        logger.exception("turn %s failed", message_id)
        await emit(
            frames.turn_error(
                reply_to=message_id,
                message=label("failure", turn.language if turn else default_language()),
                detail=exc.__class__.__name__,
            )
        )
        if turn is not None:
            failure = f"turn failed: {exc.__class__.__name__}: {exc}"[:500]
            # What the search found is kept with the failure, if the turn got that far.
            failed = trace_with_timings(found or trace_fields(None, []), clock.timings, [failure])
            await _record_failure(turn.message, streaming, live.text, failure, failed)
    finally:
        LIVE.pop(message_id, None)


# --- what a turn reads --------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnContext:
    """The turn's message and collection, and what it asks the pipeline (`plan_turn`)."""

    message: Message
    collection: Collection
    request: TurnRequest
    backends: TurnBackends

    @property
    def question(self) -> str:
        return self.request.question

    @property
    def language(self) -> str:
        """The language the turn is rewritten, searched and answered in."""
        return self.request.language


def turn_context(message_id: int) -> TurnContext:
    """Everything a turn needs about its message, its owner and the collection (sync)."""
    message = Message.objects.select_related("conversation__owner").get(pk=message_id)
    user = message.conversation.owner
    collection = default_collection()
    # One message more than the window: the rewrite learns that the conversation started
    # before what it sees (retrieve keeps only the window).
    window = history_before(message=message, limit=settings.CHATRAG_REWRITE_WINDOW + 1)
    # An earlier answer the owner may no longer read is not read again (issue 38, finding 12).
    hidden = answers_unreadable(user=user, messages=window)
    window = [m for m in window if m.id not in hidden]
    return turn_context_of(
        message,
        collection=collection,
        scope=scope_for_user(user=user, collection=collection),
        history=[
            HistoryMessage("user" if m.role == "user" else "assistant", m.text) for m in window
        ],
    )


def turn_context_of(
    message: Message, *, collection: Collection, scope: Scope, history: list[HistoryMessage]
) -> TurnContext:
    """The turn of `message` as read within `scope` with `history` before it (sync)."""
    request = turn_request_for(
        question=message.text,
        history=history,
        collection=collection,
        scope=scope,
        reader=message.conversation.owner,
    )
    backends = turn_backends_for(collection=collection, scope=scope)
    return TurnContext(message=message, collection=collection, request=request, backends=backends)


async def _answer_stored(
    turn: TurnContext,
    answer: Message,
    result: Answer,
    found: dict[str, Any],
    clock: _Clock,
    emit: Emit,
) -> None:
    """Store the answer with the turn's timings, then emit `done`: whoever reacts to it finds
    the whole turn saved."""
    status = Message.Status.STOPPED if result.stopped else Message.Status.COMPLETE
    extractive = result.kind == "extractive"
    clock.mark("to_done")  # up to the last write, which stores it with the answer
    finished = trace_with_timings(found, clock.timings, [result.error] if result.error else [])
    await _answer_finish(
        question=turn.message,
        answer=answer,
        text=result.text,
        status=status,
        error=result.error,
        extractive=extractive,
        timings_ms=finished["timings_ms"],
        errors=finished["errors"],
        check=result.why(with_text=False),
    )
    await emit(
        frames.done(
            answer_id=answer.id,
            reply_to=turn.message.id,
            status=status,
            text=result.text,
            extractive=extractive,
            timings_ms=clock.timings,
        )
    )


async def _reply_at_once(
    turn: TurnContext, plan: TurnPlan, found: dict[str, Any], clock: _Clock, emit: Emit
) -> None:
    """Store and send a reply that needs no answer step: small talk, or a question back."""
    assert plan.reply is not None
    reply_to = turn.message.id
    if plan.kind == "small_talk":
        # "obrigado!", "bom dia": a short reply, no search, no sources, no topic reopened.
        reply = await _store_reply(turn, found, clock, Message.Status.COMPLETE, plan.reply)
        await emit(
            frames.done(
                answer_id=reply.id,
                reply_to=reply_to,
                status=Message.Status.COMPLETE,
                text=plan.reply,
                extractive=False,
                small_talk=plan.small_talk,
                timings_ms=clock.timings,
            )
        )
        return
    reply = await _store_reply(turn, found, clock, Message.Status.CLARIFY, plan.reply)
    await emit(
        frames.clarify(
            answer_id=reply.id, reply_to=reply_to, question=plan.reply, options=plan.options
        )
    )


async def _planned_or_stopped(
    turn: TurnContext,
    stop: asyncio.Event,
    announce: Callable[[RewriteAnnouncement], Awaitable[None]],
) -> TurnPlan | None:
    """Rewrite and search within the turn's budget; None when the user stops it first.

    A stop cancels the rewrite and the searches it interrupts, at once, instead of being
    read when retrieval ends (35 s after it was sent, issue 38, finding 2). The search's SQL
    statements are cancelled in PostgreSQL (`retrieval.pipeline.search.cancellable`); an
    embedding already handed to a thread finishes there, and its result is dropped. Past
    CHATRAG_TURN_BUDGET_S the turn fails with TimeoutError like any failed turn (the user
    gets the error frame and may ask again).
    """
    planning = asyncio.ensure_future(plan_turn(turn.request, turn.backends, on_rewrite=announce))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        async with asyncio.timeout(settings.CHATRAG_TURN_BUDGET_S):
            await asyncio.wait({planning, stopped}, return_when=asyncio.FIRST_COMPLETED)
        return planning.result() if planning.done() else None
    finally:
        stopped.cancel()
        if not planning.done():
            planning.cancel()
            await asyncio.gather(planning, return_exceptions=True)


async def _stopped_before_answer(turn: TurnContext, clock: _Clock, emit: Emit) -> None:
    """Store and send a turn the user stopped before its answer: an empty stopped reply."""
    found = trace_fields(None, ["stopped by the user before the search ended"])
    reply = await _store_reply(turn, found, clock, Message.Status.STOPPED, "")
    await emit(
        frames.done(
            answer_id=reply.id,
            reply_to=turn.message.id,
            status=Message.Status.STOPPED,
            text="",
            extractive=False,
            timings_ms=clock.timings,
        )
    )


_load = in_db_thread(turn_context)


def _document_url(document_id: int) -> str:
    return reverse("document", args=[document_id])


# --- what a turn writes: one database call and one transaction each (`conversations.services`):
# the trace and the answer together once the search is done, the answer and the turn's timings
# at its end; in between, the text so far every SAVE_EVERY_S while a model writes.
_answer_start = in_db_thread(answer_start)
_answer_write = in_db_thread(answer_write)
_answer_finish = in_db_thread(answer_finish)
_turn_fail = in_db_thread(turn_fail)


async def _store_reply(
    turn: TurnContext, found: dict[str, Any], clock: _Clock, status: str, text: str
) -> Message:
    """Store a reply that needs no answer step with the turn's whole trace: one write."""
    clock.mark("to_done")  # up to the one write that stores the whole turn
    return await _answer_start(
        question=turn.message,
        trace=trace_with_timings(found, clock.timings),
        status=status,
        text=text,
    )


class _Clock:
    """Milliseconds from the message's arrival to each of the turn's frames and writes."""

    def __init__(self, received_at: float | None) -> None:
        self.start = received_at if received_at is not None else time.perf_counter()
        self.timings: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.timings[name] = round((time.perf_counter() - self.start) * 1000, 1)


@dataclass
class _Stream:
    """The answer being written: each piece goes out as a delta, and the text so far is saved
    every SAVE_EVERY_S (a reload, or a socket opening the conversation, shows it)."""

    answer: Message
    live: LiveTurn
    emit: Emit
    clock: _Clock
    offset: int = 0
    saved_at: float = field(default_factory=time.perf_counter)

    async def piece(self, piece: str) -> None:
        if "to_first_delta" not in self.clock.timings:
            self.clock.mark("to_first_delta")
        self.live.text += piece
        await self.emit(frames.delta(answer_id=self.answer.id, offset=self.offset, piece=piece))
        self.offset += len(piece)
        if time.perf_counter() - self.saved_at > SAVE_EVERY_S:
            await _answer_write(answer=self.answer, text=self.live.text)
            self.saved_at = time.perf_counter()


async def _record_failure(
    question: Message, answer: Message | None, text: str, failure: str, trace: dict[str, Any]
) -> None:
    """Mark the turn failed, never leaving an answer "streaming"; wait out a database restart.

    `trace`: the trace's fields, the failure among its errors."""
    for delay in (0.0, *RECORD_RETRY_DELAYS_S):
        await asyncio.sleep(delay)
        try:
            await _turn_fail(
                question=question, answer=answer, text=text, failure=failure, trace=trace
            )
            return
        except (OperationalError, InterfaceError) as exc:  # unreachable: maybe restarting
            logger.warning("turn %s: database unreachable (%s); retrying", question.id, exc)
        except Exception:  # e.g. the conversation was deleted meanwhile
            logger.exception("turn %s: could not record the failure", question.id)
            return
    logger.error("turn %s: failure not recorded; the start-up sweep will mark it", question.id)


def _never_raising(emit: Emit, message_id: int) -> Emit:
    """Wrap `emit`: a failing channel layer, like a dropped socket, must not lose the answer."""

    async def send(event: dict[str, Any]) -> None:
        try:
            await emit(event)
        except Exception as exc:
            logger.warning(
                "turn %s: could not send a %s frame: %r", message_id, event.get("type"), exc
            )

    return send
