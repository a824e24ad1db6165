"""Real turns through the turn's own path (`turn_run`, as the consumer runs them) queue their
rewrite for fidelity review as the trace is written, and the review page shows what the
rewrite saw: the masked question and window, never the person's own text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from conversations.models import Message, TurnTrace
from conversations.quality.models import RewriteFidelity
from conversations.services import conversation_create, message_store_user
from conversations.turn import turn_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

WAIT_S = 20  # a hang guard, never a performance assertion
EMAIL = "ana.souza@example.com"
FIRST = f"como funciona o vale-refeição? meu e-mail é {EMAIL}"
FOLLOW_UP = "e para estagiários?"


@database_sync_to_async
def _store(user: User, text: str, conversation: Any = None) -> Message:
    return message_store_user(
        conversation=conversation or conversation_create(user=user), text=text
    )


async def _run(message: Message) -> None:
    async def emit(event: dict[str, Any]) -> None:
        return None

    await asyncio.wait_for(turn_run(message_id=message.id, emit=emit), WAIT_S)


@database_sync_to_async
def _queued() -> dict[int, RewriteFidelity]:
    return {i.message_id: i for i in RewriteFidelity.objects.all() if i.message_id is not None}


@database_sync_to_async
def _trace(message: Message) -> TurnTrace:
    return TurnTrace.objects.get(message=message)


@database_sync_to_async
def _review_page(item: RewriteFidelity) -> str:
    rui = User.objects.create_user("rui", password="pw-rui-123", is_staff=True)
    rui.user_permissions.set(
        Permission.objects.filter(codename__in=["view_rewritefidelity", "change_rewritefidelity"])
    )
    client = Client()
    client.force_login(rui)
    response = client.get(reverse("admin:quality_rewritefidelity_change", args=[item.pk]))
    assert response.status_code == 200
    return response.content.decode()


async def test_a_turn_queues_its_rewrite_with_the_masked_question_and_window(
    small_kb: Any, personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_FIDELITY_SAMPLE_RATE = 1.0
    first = await _store(personas["ana"], FIRST)
    await _run(first)
    conversation = await database_sync_to_async(lambda: first.conversation)()
    follow_up = await _store(personas["ana"], FOLLOW_UP, conversation)
    await _run(follow_up)
    thanks = await _store(personas["ana"], "valeu, obrigado!", conversation)
    await _run(thanks)

    queued = await _queued()
    # Both questions, each once; small talk searched nothing and is not queued.
    assert set(queued) == {first.id, follow_up.id}
    trace = await _trace(follow_up)
    item = queued[follow_up.id]
    assert item.verdict == "pending" and item.policy == trace.rewrite["policy"]
    assert item.policy.startswith("rules-")
    # What the page shows is the trace's masked window: the first question, its address
    # replaced, and the answer.
    assert [m["role"] for m in trace.masked_window] == ["user", "assistant"]
    assert EMAIL not in trace.masked_window[0]["text"]
    html = await _review_page(item)
    assert EMAIL not in html
    assert trace.masked_window[0]["text"].split("?")[0] in html
    assert FOLLOW_UP in html
    # Each query searched, with why: the follow-up was read with the conversation's topic.
    for query in trace.search["queries"]:
        assert query["text"] in html
    contextual = [q for q in trace.search["queries"] if q.get("reading") == "contextual"]
    assert contextual and trace.rewrite["topic"]
    topic = trace.rewrite["topic"]
    assert f"the turn read with the conversation&#x27;s topic ({topic})" in html


async def test_a_rate_of_zero_queues_nothing(
    small_kb: Any, personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_FIDELITY_SAMPLE_RATE = 0.0
    await _run(await _store(personas["ana"], "quantos dias de férias eu tenho por ano?"))
    assert await _queued() == {}
