"""One chat turn, end to end: the orchestrating function the consumer (and tests) call.

The user's message is already stored. Events go out through `emit` in this order:
`rewrite`, then `clarify` (and stop) or `sources`, `delta`..., `done`; or `error`.
The turn runs as its own task: a socket that drops does not stop it, the answer is still
stored, and a reload shows it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.urls import reverse
from django.utils import timezone

from conversations.live import LIVE, REGISTRY, LiveTurn
from conversations.models import Message
from conversations.selectors import history_before
from conversations.services import answer_finish, answer_start, answer_write, trace_write
from conversations.trace import (
    TraceQuery,
    TraceRewrite,
    rewrite_block,
    rewrite_view,
    trace_fields,
)
from retrieval.embeddings import Embedder
from retrieval.models import Collection
from retrieval.pipeline.answer import answer_language, label
from retrieval.pipeline.fusion import MergedHit
from retrieval.pipeline.llm import ChatModel
from retrieval.pipeline.respond import Answer, answer_turn
from retrieval.pipeline.retrieve import (
    RetrievalOutcome,
    RetrievalSettings,
    RewriteAnnouncement,
    retrieve,
)
from retrieval.pipeline.rewrite_rules.smalltalk import small_talk_reply
from retrieval.pipeline.search import Scope, SearchEngine
from retrieval.pipeline.types import GlossaryEntry, HistoryMessage
from retrieval.services import (
    VocabularyLexicon,
    chat_model,
    collection_language,
    default_collection,
    default_language,
    glossary_for,
    known_names_for,
    query_embedder_for,
    retrieval_settings,
    rewrite_cache,
    scope_for_user,
    search_engine,
)

logger = logging.getLogger(__name__)
Emit = Callable[[dict[str, Any]], Awaitable[None]]
T = TypeVar("T")
SAVE_EVERY_S = 0.5


_TASKS: set[asyncio.Task[None]] = set()

# A turn's database calls run on threads of their own, concurrently, each on a pooled
# connection; `database_sync_to_async` alone sends every call of the process, one after the
# other, to a single thread, which under load was the first bottleneck (scripts/load_ws.py).
_DB_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="turn-db")


def in_db_thread(func: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """`database_sync_to_async` on the turns' own threads (the ORM is thread-safe)."""
    return database_sync_to_async(func, thread_sensitive=False, executor=_DB_THREADS)


@dataclass
class TurnContext:
    message: Message
    question: str
    history: list[HistoryMessage]
    collection: Collection
    glossary: list[GlossaryEntry]
    scope: Scope
    engine: SearchEngine
    settings: RetrievalSettings
    model: ChatModel | None
    known_names: list[str]
    embedder: Embedder | None
    # The collection's language: the answer's when a question is too short to tell.
    default_language: str


def turn_context(message_id: int) -> TurnContext:
    """Everything a turn needs about its message, its owner and the collection (sync)."""
    message = Message.objects.select_related("conversation__owner").get(pk=message_id)
    user = message.conversation.owner
    collection = default_collection()
    # One message more than the window: the rewrite learns that the conversation started
    # before what it sees (retrieve keeps only the window).
    window = history_before(message=message, limit=settings.CHATRAG_REWRITE_WINDOW + 1)
    return TurnContext(
        message=message,
        question=message.text,
        history=[
            HistoryMessage("user" if m.role == "user" else "assistant", m.text) for m in window
        ],
        collection=collection,
        glossary=glossary_for(collection=collection),
        scope=scope_for_user(user=user, collection=collection),
        engine=search_engine(),
        settings=retrieval_settings(),
        model=chat_model(),
        known_names=list(known_names_for(user)),
        embedder=query_embedder_for(collection=collection),
        default_language=collection_language(collection=collection),
    )


_load = in_db_thread(turn_context)


async def turn_retrieve(
    ctx: TurnContext,
    *,
    language: str,
    on_rewrite: Callable[[RewriteAnnouncement], Awaitable[None]] | None = None,
) -> RetrievalOutcome:
    """Rewrite and search the turn's question as its owner (the retrieval half of a turn)."""
    return await retrieve(
        question=ctx.question,
        history=ctx.history,
        glossary=ctx.glossary,
        scope=ctx.scope,
        engine=ctx.engine,
        embedder=ctx.embedder,
        lexicon=VocabularyLexicon(ctx.engine, ctx.collection.id, scope=ctx.scope),
        settings=ctx.settings,
        model=ctx.model,
        known_names=ctx.known_names,
        language=language,
        on_rewrite=on_rewrite,
        today=timezone.localdate(),
        rewrite_cache=rewrite_cache(),
    )


def start_turn(*, message_id: int, emit: Emit, received_at: float) -> LiveTurn:
    """Run a turn as an independent task (it outlives the socket that asked for it), which a
    stop from any web process reaches (`conversations.live`)."""
    live = REGISTRY.begin(message_id)
    work = turn_run(message_id=message_id, emit=emit, received_at=received_at)
    task = asyncio.create_task(REGISTRY.serve(message_id, work))
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return live


def request_stop(message_id: int) -> bool:
    """Stop a turn this process runs; `conversations.live.stop_request` reaches any process."""
    return REGISTRY.stop_here(message_id)


def _source_cards(passages: list[MergedHit]) -> list[dict[str, Any]]:
    cards = []
    for number, item in enumerate(passages, start=1):
        hit = item.hit
        snippet = " ".join(hit.text.split())
        cards.append(
            {
                "n": number,
                "document_id": hit.document_id,
                "chunk_id": hit.chunk_id,
                "title": hit.title,
                "section": hit.heading,
                "snippet": snippet[:280] + ("…" if len(snippet) > 280 else ""),
                "url": reverse("document", args=[hit.document_id])
                + f"?chunk={hit.chunk_id}#chunk-{hit.chunk_id}",
            }
        )
    return cards


def _rewrite_frame(
    announced: RewriteAnnouncement, question: str, message_id: int
) -> dict[str, Any]:
    """The live [rewrite] block, built as the stored trace's is (`conversations.trace`),
    with the queries in the user's own words."""
    unmask = announced.masker.unmask
    view = rewrite_view(
        TraceRewrite.of(announced.rewrite),
        [TraceQuery.of(q, text=unmask(q.text)) for q in announced.queries],
    )
    block = rewrite_block(view, original=question, errors=announced.errors)
    return {"type": "rewrite", "message_id": message_id, **block}


# The turn's writes, each one database call and one transaction (`conversations.services`):
# the trace and the answer together once the search is done, the answer and the turn's
# timings at its end; in between, the text so far every SAVE_EVERY_S while a model writes.
_answer_start = in_db_thread(answer_start)
_answer_write = in_db_thread(answer_write)


_answer_finish = in_db_thread(answer_finish)


def _with_timings(
    trace: dict[str, Any], timings: dict[str, float], errors: Sequence[str] = ()
) -> dict[str, Any]:
    """The trace's fields with the frame timings and these errors added."""
    return {
        **trace,
        "timings_ms": {**trace.get("timings_ms", {}), **timings},
        "errors": list(dict.fromkeys([*trace["errors"], *errors])),
    }


@in_db_thread
def _store_failure(
    message: Message, streaming: Message | None, text: str, failure: str, trace: dict[str, Any]
) -> None:
    """Record a failed turn in one transaction: answer, trace and question change together."""
    with transaction.atomic():
        if streaming is not None:
            answer_write(answer=streaming, text=text, status=Message.Status.ERROR, error=failure)
        trace_write(message=message, fields=trace)
        Message.objects.filter(pk=message.pk).update(status=Message.Status.ERROR)


async def turn_run(*, message_id: int, emit: Emit, received_at: float | None = None) -> None:
    """Rewrite, search, answer and store one turn, emitting events as it goes."""
    start = received_at if received_at is not None else time.perf_counter()

    def since() -> float:
        return round((time.perf_counter() - start) * 1000, 1)

    live = LIVE.setdefault(message_id, LiveTurn(user_message_id=message_id))
    timings: dict[str, float] = {}
    ctx: TurnContext | None = None
    trace: dict[str, Any] | None = None  # the trace's fields, once the search is done
    streaming: Message | None = None  # the answer row while it is being written
    emit = _never_raising(emit, message_id)
    try:
        ctx = await _load(message_id)
        language = answer_language(ctx.question, ctx.default_language)
        question = ctx.question

        async def announce(announced: RewriteAnnouncement) -> None:
            # The user sees what will be searched before the searches run.
            await emit(_rewrite_frame(announced, question, message_id))
            timings["to_rewrite_frame"] = since()

        outcome = await turn_retrieve(ctx, language=language, on_rewrite=announce)
        trace = found = trace_fields(outcome, outcome.errors)

        rewrite = outcome.rewrite

        async def reply(status: str, text: str, frame: str, /, **fields: Any) -> None:
            """Store a reply that needs no answer step with the trace, then send it."""
            # `to_done`: up to the one write that stores the whole turn.
            timings["to_done"] = since()
            answer = await _answer_start(
                question=ctx.message, trace=_with_timings(found, timings), status=status, text=text
            )
            await emit({"type": frame, "message_id": answer.id, "reply_to": message_id, **fields})

        if rewrite.no_search and rewrite.small_talk:
            # "obrigado!", "bom dia": a short reply, no search, no sources, no topic reopened.
            text = small_talk_reply(rewrite.small_talk, language)
            status = Message.Status.COMPLETE
            await reply(
                status,
                text,
                "done",
                status=status,
                text=text,
                extractive=False,
                small_talk=rewrite.small_talk,
                timings_ms=timings,
            )
            return
        if rewrite.needs_clarification and rewrite.clarification is not None:
            question_back = rewrite.clarification
            await reply(
                Message.Status.CLARIFY,
                question_back.question,
                "clarify",
                question=question_back.question,
                options=list(question_back.options),
            )
            return

        cards = _source_cards(outcome.passages)
        answer = streaming = await _answer_start(
            question=ctx.message, trace=found, status=Message.Status.STREAMING, sources=cards
        )
        live.assistant_message_id = answer.id
        await emit(
            {"type": "sources", "message_id": answer.id, "reply_to": message_id, "sources": cards}
        )
        timings["to_sources_frame"] = since()

        result = await _answer(ctx, outcome, language, answer, live, emit, timings, since)
        final, error, extractive = result.text, result.error, result.kind == "extractive"
        status = Message.Status.STOPPED if result.stopped else Message.Status.COMPLETE
        # `to_done`: up to the last write, which stores it with the answer. Stored before
        # `done` goes out: whoever reacts to it finds the whole turn saved.
        timings["to_done"] = since()
        finished = _with_timings(found, timings, [error] if error else [])
        await _answer_finish(
            question=ctx.message,
            answer=answer,
            text=final,
            status=status,
            error=error,
            extractive=extractive,
            timings_ms=finished["timings_ms"],
            errors=finished["errors"],
        )
        streaming = None
        await emit(
            {
                "type": "done",
                "message_id": answer.id,
                "reply_to": message_id,
                "status": status,
                "text": final,
                "extractive": extractive,
                "timings_ms": timings,
            }
        )
    except Exception as exc:  # the user always gets an answer frame, never silence
        logger.exception("turn %s failed", message_id)
        await emit(
            {
                "type": "error",
                "reply_to": message_id,
                "message": label(
                    "failure",
                    answer_language(ctx.question, ctx.default_language)
                    if ctx
                    else default_language(),
                ),
                "detail": exc.__class__.__name__,
            }
        )
        if ctx is not None:
            failure = f"turn failed: {exc.__class__.__name__}: {exc}"[:500]
            # What the search found is kept with the failure, if the turn got that far.
            failed = _with_timings(trace or trace_fields(None, []), timings, [failure])
            await _record_failure(ctx.message, streaming, live.text, failure, failed)
    finally:
        LIVE.pop(message_id, None)


# Waits between tries to store a failure while the database is unreachable (about 30 s in all:
# a restart; beyond that the start-up sweep, `manage.py recover_interrupted`, marks the turn).
RECORD_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)


async def _record_failure(
    message: Message, streaming: Message | None, text: str, failure: str, trace: dict[str, Any]
) -> None:
    """Mark the turn failed, never leaving an answer "streaming"; wait out a database restart.

    `trace`: the trace's fields, the failure among its errors."""
    for delay in (0.0, *RECORD_RETRY_DELAYS_S):
        await asyncio.sleep(delay)
        try:
            await _store_failure(message, streaming, text, failure, trace)
            return
        except (OperationalError, InterfaceError) as exc:  # unreachable: maybe restarting
            logger.warning("turn %s: database unreachable (%s); retrying", message.id, exc)
        except Exception:  # e.g. the conversation was deleted meanwhile
            logger.exception("turn %s: could not record the failure", message.id)
            return
    logger.error("turn %s: failure not recorded; the start-up sweep will mark it", message.id)


async def _answer(
    ctx: TurnContext,
    outcome: RetrievalOutcome,
    language: str,
    answer: Message,
    live: LiveTurn,
    emit: Emit,
    timings: dict[str, float],
    since: Callable[[], float],
) -> Answer:
    """Stream the answer step (`retrieval.pipeline.respond`) to the page, saving as it goes."""
    offset = 0
    last_save = time.perf_counter()

    async def send(piece: str) -> None:
        nonlocal offset, last_save
        if "to_first_delta" not in timings:
            timings["to_first_delta"] = since()
        live.text += piece
        await emit({"type": "delta", "message_id": answer.id, "offset": offset, "delta": piece})
        offset += len(piece)
        if time.perf_counter() - last_save > SAVE_EVERY_S:
            await _answer_write(answer=answer, text=live.text)
            last_save = time.perf_counter()

    return await answer_turn(
        outcome=outcome,
        language=language,
        model=ctx.model,
        today=timezone.localdate(),
        model_timeout=settings.CHATRAG_LLM_TIMEOUT,
        on_piece=send,
        stop=live.stop,
    )


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
