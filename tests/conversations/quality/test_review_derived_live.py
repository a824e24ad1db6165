"""Text a real turn derived from a restricted document, on the staff pages (issue 38, finding 3).

Rita (in rh-restrito) talks over the real chat WebSocket; the rule rewriter, the search and
the extractive answer run as in production on the small demo knowledge base plus the
restricted page that alone says "dossiê". Vera (staff with view rights, outside the group)
then opens the conversation's timeline and each turn's page; Helena (the same rights, in the
group) opens them too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.urls import reverse

from conversations.models import Message, TurnTrace
from tests.conversations.quality.test_review_restricted import REVIEW_RIGHTS, _get, _staff
from tests.conversations.test_consumer import _ask, kb_with_restricted_word  # noqa: F401
from tests.support import ws_connected

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.asyncio,
]

RESTRICTED_WORDS = ("dossie", "dossiê")


@pytest.fixture(autouse=True)
def _settled(ws_settled: None) -> None:
    """Every test here uses the socket: settle it (tests/conversations/conftest.py)."""


@database_sync_to_async
def _pages(conversation_id: int, viewer: User) -> dict[str, str]:
    traces = TurnTrace.objects.filter(message__conversation_id=conversation_id).order_by("id")
    urls = [reverse("admin:conversations_conversation_change", args=[conversation_id])]
    urls += [reverse("admin:conversations_turntrace_change", args=[t.pk]) for t in traces]
    return {url: _get(viewer, url) for url in urls}


@database_sync_to_async
def _stored(conversation_id: int) -> str:
    traces = TurnTrace.objects.filter(message__conversation_id=conversation_id)
    answers = Message.objects.filter(conversation_id=conversation_id, role="assistant")
    return json.dumps(
        [[t.rewrite, t.search] for t in traces] + [[a.text, a.sources] for a in answers],
        ensure_ascii=False,
    )


@pytest.mark.usefixtures("kb_with_restricted_word")
@pytest.mark.parametrize(
    "follow_up", ["e quem pode consultar?", "e por quanto tempo ele fica guardado?"]
)
async def test_a_restricted_spelling_fix_carried_into_a_follow_up_is_hidden_from_staff_outside(
    personas: dict[str, Any], follow_up: str
) -> None:
    """Rita misspells a word only the restricted page says; the rules correct it from her
    vocabulary and the follow-up carries it. Vera must not read the corrected word on any
    page (it tells that a restricted page says it); Helena does."""
    vera = await database_sync_to_async(_staff)("vera", rights=REVIEW_RIGHTS)
    helena = await database_sync_to_async(_staff)("helena", rights=REVIEW_RIGHTS, group=True)
    rita = await ws_connected(personas["rita"])
    first = await _ask(rita, "onde fica guardado o dosie de apuração?")
    conversation = first[0]["id"]
    await _ask(rita, follow_up, conversation=conversation)
    await rita.disconnect()
    stored = (await _stored(conversation)).casefold()
    assert "dossie" in stored  # the turns did derive the restricted word

    for url, html in (await _pages(conversation, vera)).items():
        folded = html.casefold()
        for word in RESTRICTED_WORDS:
            assert word not in folded, (url, word)
        assert "dosie" in folded, url  # Rita's own words stay
    helena_pages = await _pages(conversation, helena)
    assert any("dossie" in html.casefold() for html in helena_pages.values())
