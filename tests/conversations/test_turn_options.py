"""An option of a question back, sent as the next turn, is searched with what was asked.

The chat's own turn (`turn_run`) on the real database and search over sibling pages of the
demo knowledge base: the page's button sends only the option's title, and the rewrite (not
the browser) joins it to the question the person had asked; the trace names the rule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async

from conversations.models import Message
from conversations.services import conversation_create, message_store_user
from conversations.turn import turn_run
from tests.conftest import DEMO_KB

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

WAIT_S = 60  # a hang guard, never a performance assertion
# Three plans, and pages beside them that share none of their title words.
PAGES = [
    "pt/plano-de-saude",
    "pt/plano-odontologico",
    "pt/plano-de-saude-prestadores-pj",
    "pt/vale-transporte",
    "pt/ferias-regras-gerais",
]


@pytest.fixture
def plans_kb(personas: dict[str, Any], settings: Any) -> Any:
    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.services import documents_ingest, source_from_file
    from retrieval.services import default_collection

    settings.CHATRAG_REWRITE_CACHE_SECONDS = 0
    collection = default_collection()
    items = [source_from_file(DEMO_KB / f"{name}.md", root=DEMO_KB) for name in PAGES]
    report = documents_ingest(
        collection=collection, sources=items, embedder=get_embedder(), total=len(items)
    )
    assert not report.errors, report.errors
    return collection


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


def _frame(frames: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(f for f in frames if f["type"] == kind)


async def test_a_chosen_option_is_searched_with_the_question_it_answers(
    plans_kb: Any, personas: dict[str, Any]
) -> None:
    first = await _store(personas["ana"], "o plano paga o dentista?")
    asked = _frame(await _run(first), "clarify")
    choice = next(o for o in asked["options"] if "odontológico" in o)

    second = await _store(personas["ana"], choice, conversation=first.conversation)
    frames = await _run(second)
    rewrite = _frame(frames, "rewrite")
    searched = " ".join(q["text"] for q in rewrite["queries"]).lower()
    assert "odontológico" in searched
    assert "dentista" in searched and "paga" in searched  # the question's own words
    assert "chosen_option" in [r["id"] for r in rewrite["rules"]]
    # The person chose: the turn is answered, not asked back again.
    assert not [f for f in frames if f["type"] == "clarify"]
    sources = _frame(frames, "sources")
    assert "odontológico" in sources["sources"][0]["title"].lower()


async def test_a_turn_that_only_resembles_an_option_is_read_as_its_own_question(
    plans_kb: Any, personas: dict[str, Any]
) -> None:
    first = await _store(personas["ana"], "o plano paga o dentista?")
    await _run(first)
    # Not one of the options offered: a new question, searched as such.
    second = await _store(personas["ana"], "e o vale-transporte?", conversation=first.conversation)
    rewrite = _frame(await _run(second), "rewrite")
    assert "chosen_option" not in [r["id"] for r in rewrite["rules"]]
