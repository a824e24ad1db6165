"""A turn's rewrite gets today's date and its trace names the policy that rewrote it.

The model server is a real local HTTP server speaking Ollama's protocol (as in
test_turn.py); the staff timeline shows the policy of each turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conversations.models import Message, TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.turn import RUNNING, turn_run
from retrieval.pipeline.rewrite_llm import llm_policy
from retrieval.pipeline.rewrite_rules import POLICY_VERSION
from retrieval.services import _chat_model, chat_model

WAIT_S = 20  # a hang guard, never a performance assertion
REWRITE = {
    "queries": [{"text": "dias de férias por ano", "type": "normalize", "area": None}],
    "needs_clarification": False,
    "clarification": None,
}


@pytest_asyncio.fixture
async def ollama(settings: Any, model_server: HTTPServer) -> AsyncIterator[HTTPServer]:
    model_server.clear()
    settings.CHATRAG_LLM_BACKEND = "retrieval.pipeline.llm.OllamaChat"
    settings.CHATRAG_LLM_URL = model_server.url_for("/")
    settings.CHATRAG_LLM_MODEL = "test-model"
    _chat_model.cache_clear()
    yield model_server
    if RUNNING:
        await asyncio.wait_for(asyncio.gather(*RUNNING, return_exceptions=True), WAIT_S)
    model = chat_model()
    if model is not None:
        await model.aclose()
    _chat_model.cache_clear()
    model_server.check_assertions()


def _reply(request: Request) -> Response:
    body = json.loads(request.get_data())
    if body.get("stream"):
        lines = [
            {"message": {"role": "assistant", "content": "30 dias por ano [1]."}, "done": False},
            {"message": {"role": "assistant", "content": ""}, "done": True},
        ]
        return Response(
            "".join(json.dumps(line) + "\n" for line in lines), mimetype="application/x-ndjson"
        )
    reply = {"model": body["model"], "message": {"content": json.dumps(REWRITE)}, "done": True}
    return Response(json.dumps(reply), mimetype="application/json")


@database_sync_to_async
def _store(user: Any, text: str) -> Message:
    return message_store_user(conversation=conversation_create(user=user), text=text)


async def _turn(user: Any, text: str) -> TurnTrace:
    message = await _store(user, text)

    async def emit(event: dict[str, Any]) -> None:
        pass

    await asyncio.wait_for(turn_run(message_id=message.id, emit=emit), WAIT_S)
    trace: TurnTrace = await database_sync_to_async(TurnTrace.objects.get)(message=message)
    return trace


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_model_rewrite_prompt_carries_todays_date_and_the_trace_its_policy(
    small_kb: Any, personas: dict[str, Any], ollama: HTTPServer
) -> None:
    ollama.expect_request("/api/chat", method="POST").respond_with_handler(_reply)
    trace = await _turn(personas["ana"], "quantos dias de férias eu tenho por ano?")
    rewrite_body = json.loads(ollama.log[0][0].get_data())
    assert rewrite_body["stream"] is False
    system = rewrite_body["messages"][0]["content"]
    assert f"Today's date: {timezone.localdate().isoformat()}" in system
    assert "unknown" not in system.split("Today's date:", 1)[1].split("\n", 1)[0]
    assert trace.rewrite["backend"] == "llm"
    assert trace.rewrite["policy"] == llm_policy("test-model")


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_rules_turn_records_the_rules_version(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    trace = await _turn(personas["ana"], "quantos dias de férias eu tenho por ano?")
    assert trace.rewrite["backend"] == "rules"
    assert trace.rewrite["policy"] == POLICY_VERSION


@pytest.mark.django_db
def test_the_staff_timeline_shows_each_turns_policy(personas: dict[str, Any]) -> None:
    conversation = conversation_create(user=personas["ana"])
    for text, rewrite in (
        ("primeira", {"backend": "rules", "policy": POLICY_VERSION}),
        ("segunda", {"backend": "llm", "model": "m", "policy": "llm/m/prompt-0123456789ab"}),
        ("antiga", {"backend": "rules"}),  # a trace from before policies were kept
    ):
        message = message_store_user(conversation=conversation, text=text)
        TurnTrace.objects.create(message=message, masked_question=text, rewrite=rewrite)
    admin = User.objects.create_superuser("boss", password="pw-boss-123")
    client = Client()
    client.force_login(admin)
    page = client.get(
        reverse("admin:conversations_conversation_change", args=[conversation.pk])
    ).content.decode()
    assert page.count("Rewrite policy") == 3
    assert f"<code>{POLICY_VERSION}</code>" in page
    assert "<code>llm/m/prompt-0123456789ab</code>" in page
    assert "not recorded" in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_repeated_turn_takes_its_rewrite_from_the_cache_only_for_the_same_reader(
    small_kb: Any, personas: dict[str, Any], settings: Any, ollama: HTTPServer
) -> None:
    from django.core.cache import cache

    settings.CHATRAG_REWRITE_CACHE_SECONDS = 3600
    await cache.aclear()
    ollama.expect_request("/api/chat", method="POST").respond_with_handler(_reply)
    question = "quantos dias de férias eu tenho por ano?"

    def rewrites_asked() -> int:
        return sum(not json.loads(r.get_data()).get("stream") for r, _ in ollama.log)

    first = await _turn(personas["ana"], question)
    again = await _turn(personas["ana"], question)
    assert first.rewrite["cache"] == "miss" and again.rewrite["cache"] == "hit"
    assert rewrites_asked() == 1  # the second turn never asked the model to rewrite
    assert [q["text"] for q in again.rewrite["queries"]] == [
        q["text"] for q in first.rewrite["queries"]
    ]
    assert any(n.startswith("rewrite cache: hit") for n in again.rewrite["notes"])
    # Rita reads the restricted group's documents: her rewrite is her own.
    other = await _turn(personas["rita"], question)
    assert other.rewrite["cache"] == "miss" and rewrites_asked() == 2
    await cache.aclear()
