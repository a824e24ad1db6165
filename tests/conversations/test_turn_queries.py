"""A turn's database work is pinned: how many statements, writes and commits it takes.

Each commit waits for the disk (about 3.5 ms on the benchmark machine, a round trip 0.1 ms),
so a turn stores its trace and answer in one transaction once the search is done and its
final answer and timings in another, and reads nothing it wrote. Counted against the real
database, from every thread the turn uses (`tests.support.statements_counted`). The search
itself runs on the search engine's own pool and is not counted here (bench_search measures
it). A change that adds a statement to every turn makes these fail: count again, and say why
in the commit.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from channels.db import database_sync_to_async

from conversations.models import Message, TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.turn import turn_run
from retrieval.services import collection_language
from tests.support import statements_counted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

WAIT_S = 20  # a hang guard, never a performance assertion
QUESTION = "quantos dias de férias eu tenho por ano?"
# The turn's context, read in one database call (`turn_context`): the message and its
# owner, the collection, the history window, the glossary, the owner's groups; and the
# collection's language and the areas of what the owner may read, each counted once a minute
# per process (the first turn of a collection, of a reader's groups).
CONTEXT_READS = 5
COLLECTION_COUNTS = 2


@pytest.fixture(autouse=True)
def _no_rewrite_cache(settings: Any) -> None:
    """The rewrite cache is the database cache here (Redis in production): not the turn's."""
    settings.CHATRAG_REWRITE_CACHE_SECONDS = 0


@database_sync_to_async
def _store(user: Any, text: str, conversation: Any = None) -> Message:
    return message_store_user(
        conversation=conversation or conversation_create(user=user), text=text
    )


async def _run(message: Message) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    await asyncio.wait_for(turn_run(message_id=message.id, emit=emit), WAIT_S)
    return frames


def _tables(writes: list[str]) -> list[str]:
    return [m.group(1) for w in writes if (m := re.match(r'(?:INSERT INTO|UPDATE) "(\w+)"', w))]


@database_sync_to_async
def _trace(message: Message) -> TurnTrace:
    return TurnTrace.objects.get(message=message)


async def test_an_answered_turn_reads_its_context_once_and_commits_twice(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    message = await _store(personas["ana"], QUESTION)
    with statements_counted() as seen:
        frames = await _run(message)
    assert [f["type"] for f in frames if f["type"] != "delta"] == ["rewrite", "sources", "done"]
    # Trace + answer + the question marked answered; then the answer + the trace's timings.
    assert _tables(seen.writes) == [
        "conversations_turntrace",
        "conversations_message",
        "conversations_message",
        "conversations_message",
        "conversations_turntrace",
    ], seen.listing()
    assert seen.commits == 2, seen.listing()
    # The reads, the five writes, and the savepoint that keeps the timings from failing it.
    assert len(seen.sql) == COLLECTION_COUNTS + CONTEXT_READS + 5 + 2, seen.listing()
    # What was written once is whole: nothing read back to merge the timings into it.
    trace = await _trace(message)
    assert {"embed", "search", "to_sources_frame", "to_done"} <= set(trace.timings_ms)
    assert trace.search["passages"] and not trace.errors


async def test_a_turn_sampled_for_fidelity_review_adds_one_insert_to_its_first_commit(
    small_kb: Any, personas: dict[str, Any], settings: Any
) -> None:
    """The queue is written with the trace, in its transaction: one INSERT (in a savepoint,
    so that failing to queue never fails the turn), no commit of its own. A turn that is not
    sampled writes nothing more (the test above: the rate is 0 in tests)."""
    settings.CHATRAG_FIDELITY_SAMPLE_RATE = 1.0
    message = await _store(personas["ana"], QUESTION)
    with statements_counted() as seen:
        await _run(message)
    assert _tables(seen.writes) == [
        "conversations_turntrace",
        "quality_rewritefidelity",
        "conversations_message",
        "conversations_message",
        "conversations_message",
        "conversations_turntrace",
    ], seen.listing()
    assert seen.commits == 2, seen.listing()
    # The reads, six writes, its savepoint (2) and the timings' savepoint (2).
    assert len(seen.sql) == COLLECTION_COUNTS + CONTEXT_READS + 6 + 2 + 2, seen.listing()


async def test_a_reply_without_an_answer_step_is_one_write_call(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    """Small talk (and clarification) store the trace, the reply and its timings at once."""
    first = await _store(personas["ana"], QUESTION)
    await _run(first)
    conversation = await database_sync_to_async(lambda: first.conversation)()
    thanks = await _store(personas["ana"], "valeu, obrigado!", conversation)
    with statements_counted() as seen:
        frames = await _run(thanks)
    assert [f["type"] for f in frames] == ["rewrite", "done"]
    assert len(seen.writes) == 3 and seen.commits == 1, seen.listing()
    # Its language known; the window's past answers checked against what Ana may still read
    # (conversations.past: the traces, her groups, the documents).
    assert len(seen.sql) == CONTEXT_READS + 3 + 3, seen.listing()
    assert "to_done" in (await _trace(thanks)).timings_ms


async def test_the_collections_language_is_counted_once_a_minute(small_kb: Any) -> None:
    """An aggregate over every document of the collection: not once per turn."""
    language = database_sync_to_async(collection_language)
    with statements_counted() as first:
        assert await language(collection=small_kb) == "pt"
    with statements_counted() as again:
        assert await language(collection=small_kb) == "pt"
    assert len(first.sql) == 1 and again.sql == []
