"""Who may do what over the chat WebSocket: every action the consumer accepts, every persona.

Actions: open (follow a conversation), message (into an existing one), stop, ping. Another
user's id is the same "not_found" error as an id that does not exist, with none of the data;
anonymous sockets are closed before any action; a session that ends closes the socket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.contrib.sessions.models import Session

from conversations import live
from conversations.models import Conversation, Message
from tests.support import (
    WS_WAIT_S,
    ws_communicator,
    ws_connected,
    ws_pong,
    ws_until,
)

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.asyncio,
]

SECRET_QUESTION = "qual a banda P3 da Ana?"
SECRET_PARTIAL = "Resposta secreta em andamento"


@pytest.fixture(autouse=True)
def _settled(ws_settled: None) -> None:
    """Every test here uses the socket: settle it (tests/conversations/conftest.py)."""


@dataclass
class Owned:
    conversation: int
    question: int
    answer: int


@database_sync_to_async
def _anas_conversation(ana: Any) -> Owned:
    """A conversation of Ana's with an answer still being written (what `open` resyncs)."""
    conversation = Conversation.objects.create(owner=ana, title="Salário da Ana")
    question = Message.objects.create(
        conversation=conversation, role="user", text=SECRET_QUESTION, status="complete"
    )
    answer = Message.objects.create(
        conversation=conversation,
        role="assistant",
        text=SECRET_PARTIAL,
        status=Message.Status.STREAMING,
        reply_to=question,
    )
    return Owned(conversation.id, question.id, answer.id)


def _frames(owned: Owned) -> dict[str, dict[str, Any]]:
    return {
        "open": {"type": "open", "conversation": owned.conversation},
        "message": {"type": "message", "conversation": owned.conversation, "text": "me mostra"},
        "stop": {"type": "stop", "message_id": owned.question},
        "stop-the-answer-id": {"type": "stop", "message_id": owned.answer},
    }


@database_sync_to_async
def _user_messages(conversation_id: int) -> list[str]:
    return list(
        Message.objects.filter(conversation_id=conversation_id, role="user")
        .order_by("id")
        .values_list("text", flat=True)
    )


ACTIONS = ["open", "message", "stop", "stop-the-answer-id"]


def _recording(stops: list[int], outcome: str) -> Any:
    """A stand-in for `live.stop_request` that records which turns were asked to stop."""

    async def stop_request(message_id: int, *, reply_to: str) -> str:
        stops.append(message_id)
        return outcome

    return stop_request


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("persona", ["rita", "carlos"])
async def test_another_users_ids_give_not_found_and_no_data(
    personas: dict[str, Any], persona: str, action: str
) -> None:
    owned = await _anas_conversation(personas["ana"])
    stops: list[int] = []
    original = live.stop_request
    live.stop_request = _recording(stops, "unreachable")  # type: ignore[assignment]
    try:
        communicator = await ws_connected(personas[persona])
        await communicator.send_json_to(_frames(owned)[action])
        error = await communicator.receive_json_from(timeout=WS_WAIT_S)
        await ws_pong(communicator)  # and nothing else was sent
        await communicator.disconnect()
    finally:
        live.stop_request = original  # type: ignore[assignment]
    assert error["type"] == "error" and error["code"] == "not_found"
    leaked = json.dumps(error, ensure_ascii=False)
    for secret in (SECRET_QUESTION, SECRET_PARTIAL, "Salário da Ana", str(owned.answer)):
        assert secret not in leaked
    assert stops == []
    assert await _user_messages(owned.conversation) == [SECRET_QUESTION]


@pytest.mark.parametrize("action", ["open", "message", "stop"])
async def test_owner_can_do_each_action(personas: dict[str, Any], action: str) -> None:
    owned = await _anas_conversation(personas["ana"])
    stops: list[int] = []
    original = live.stop_request
    live.stop_request = _recording(stops, "here")  # type: ignore[assignment]
    try:
        communicator = await ws_connected(personas["ana"])
        await communicator.send_json_to(_frames(owned)[action])
        if action == "open":
            snapshot = await communicator.receive_json_from(timeout=WS_WAIT_S)
            assert snapshot["type"] == "snapshot"
            assert (snapshot["message_id"], snapshot["text"]) == (owned.answer, SECRET_PARTIAL)
        elif action == "message":
            frames = await ws_until(communicator, "done", "clarify", "error")
            assert frames[0]["type"] == "accepted"
            assert frames[0]["conversation"] == owned.conversation
        await ws_pong(communicator)
        await communicator.disconnect()
    finally:
        live.stop_request = original  # type: ignore[assignment]
    assert stops == ([owned.question] if action == "stop" else [])
    if action == "message":
        assert await _user_messages(owned.conversation) == [SECRET_QUESTION, "me mostra"]


async def test_anonymous_socket_is_closed_before_any_action() -> None:
    communicator = await ws_communicator(user=None)
    connected, code = await communicator.connect(timeout=WS_WAIT_S)
    assert (connected, code) == (False, 4401)


async def test_refused_ids_do_not_use_up_the_rate_limit(
    personas: dict[str, Any], settings: Any
) -> None:
    """The allowance is counted after the ownership check (it was counted before)."""
    settings.CHATRAG_RATE_LIMIT_PER_MINUTE = 1
    owned = await _anas_conversation(personas["ana"])
    communicator = await ws_connected(personas["carlos"])
    for _ in range(3):
        await communicator.send_json_to(_frames(owned)["message"])
        error = await communicator.receive_json_from(timeout=WS_WAIT_S)
        assert error["code"] == "not_found"
    # Before the fix the first refused frame had used up Carlos's one message a minute.
    await communicator.send_json_to({"type": "message", "conversation": None, "text": "oi"})
    frames = await ws_until(communicator, "accepted", "error")
    assert [f["type"] for f in frames] == ["conversation", "accepted"]
    await ws_until(communicator, "done", "clarify", "error")
    await communicator.disconnect()


async def _logout_elsewhere(user: Any) -> None:
    await database_sync_to_async(Session.objects.all().delete)()


async def _deactivate(user: Any) -> None:
    user.is_active = False
    await database_sync_to_async(user.save)(update_fields=["is_active"])


async def _change_password(user: Any) -> None:
    user.set_password("a-new-password-123")
    await database_sync_to_async(user.save)(update_fields=["password"])


@pytest.mark.parametrize(
    "revoke",
    [_logout_elsewhere, _deactivate, _change_password],
    ids=["logged-out", "deactivated", "password-changed"],
)
@pytest.mark.parametrize("action", ["open", "message", "stop"])
async def test_ended_session_closes_the_socket_at_the_next_action(
    personas: dict[str, Any], revoke: Any, action: str
) -> None:
    owned = await _anas_conversation(personas["ana"])
    communicator = await ws_connected(personas["ana"])
    await ws_pong(communicator)
    await revoke(personas["ana"])
    await communicator.send_json_to(_frames(owned)[action])
    error = await communicator.receive_json_from(timeout=WS_WAIT_S)
    assert (error["type"], error["code"]) == ("error", "unauthorized")
    assert SECRET_PARTIAL not in json.dumps(error)
    closed = await communicator.receive_output(timeout=WS_WAIT_S)
    assert closed == {"type": "websocket.close", "code": 4401}
    assert await _user_messages(owned.conversation) == [SECRET_QUESTION]


async def test_session_cookie_of_another_site_user_cannot_be_replayed_after_logout(
    personas: dict[str, Any],
) -> None:
    """A stolen cookie stops working once its owner signs out."""
    key = await sync_to_async(_cookie_then_logout)(personas["ana"])
    from channels.testing import WebsocketCommunicator

    from chatrag.asgi import application

    communicator = WebsocketCommunicator(
        application,
        "/ws/chat/",
        headers=[
            (b"host", b"127.0.0.1:8000"),
            (b"origin", b"http://127.0.0.1:8000"),
            (b"cookie", f"sessionid={key}".encode()),
        ],
    )
    connected, code = await communicator.connect(timeout=WS_WAIT_S)
    assert (connected, code) == (False, 4401)


def _cookie_then_logout(user: Any) -> str:
    from django.test import Client

    client = Client()
    client.force_login(user)
    key = client.cookies["sessionid"].value
    client.post("/logout/")
    return key


# --- a socket that resyncs a streaming answer (issue 38) ----------------------------------------

RESTRICTED_TITLE = "Faixas salariais 2026"
RESTRICTED_PARTIAL = "A faixa do Analista III vai de R$ 9.800"


@database_sync_to_async
def _ritas_restricted_answer(rita: Any) -> Owned:
    """Rita's answer from the restricted salary table, still being written."""
    from django.contrib.auth.models import Group

    from retrieval.models import Document
    from retrieval.services import default_collection
    from tests.conftest import RESTRICTED

    salary = Document.objects.create(
        collection=default_collection(),
        external_id="pt/faixas-salariais-2026",
        title=RESTRICTED_TITLE,
        checksum="s",
    )
    salary.groups.add(Group.objects.get(name=RESTRICTED))
    conversation = Conversation.objects.create(owner=rita, title="Faixas")
    question = Message.objects.create(
        conversation=conversation, role="user", text="qual a faixa do nível 3?", status="complete"
    )
    answer = Message.objects.create(
        conversation=conversation,
        role="assistant",
        text=RESTRICTED_PARTIAL,
        status=Message.Status.STREAMING,
        reply_to=question,
        sources=[{"n": 1, "document_id": salary.pk, "title": RESTRICTED_TITLE}],
    )
    return Owned(conversation.id, question.id, answer.id)


@pytest.mark.parametrize("member", [True, False])
async def test_a_resync_shows_a_streaming_answer_only_as_a_reload_would(
    personas: dict[str, Any], member: bool
) -> None:
    """A socket opening a conversation is sent the answers still being written (`snapshot`)
    and then their frames relayed from the socket that asked. The page hides an answer from a
    document its owner may no longer read (finding 12); the snapshot sent it whole, with its
    source card, and the relayed frames went on with the rest. Now both follow the page."""
    from channels.layers import get_channel_layer

    from conversations.consumers import group_name
    from conversations.past import NO_LONGER_AVAILABLE

    rita = personas["rita"]
    owned = await _ritas_restricted_answer(rita)
    if not member:  # she left the group while the answer was being written
        await database_sync_to_async(rita.groups.clear)()
    socket = await ws_connected(rita)
    await socket.send_json_to({"type": "open", "conversation": owned.conversation})
    snapshot = await socket.receive_json_from(timeout=WS_WAIT_S)
    await ws_pong(socket)
    # The rest of the turn, relayed from the process and socket that run it.
    rest = " a R$ 13.200 [1]."
    events = [
        {
            "type": "delta",
            "message_id": owned.answer,
            "offset": len(RESTRICTED_PARTIAL),
            "delta": rest,
        },
        {
            "type": "done",
            "message_id": owned.answer,
            "reply_to": owned.question,
            "status": "complete",
            "text": RESTRICTED_PARTIAL + rest,
            "extractive": False,
            "timings_ms": {},
        },
    ]
    await get_channel_layer().group_send(
        group_name(owned.conversation), {"type": "turn.events", "events": events, "origin": "x"}
    )
    relayed = await ws_until(socket, "done")
    await socket.disconnect()

    assert snapshot["type"] == "snapshot" and snapshot["message_id"] == owned.answer
    if member:
        assert snapshot["text"] == RESTRICTED_PARTIAL
        assert [s["title"] for s in snapshot["sources"]] == [RESTRICTED_TITLE]
        assert relayed == events
        return
    assert (snapshot["text"], snapshot["sources"]) == (str(NO_LONGER_AVAILABLE), [])
    assert [f["type"] for f in relayed] == ["done"]
    assert relayed[0]["text"] == str(NO_LONGER_AVAILABLE)
    leaked = json.dumps([snapshot, *relayed], ensure_ascii=False)
    for secret in (RESTRICTED_PARTIAL, RESTRICTED_TITLE, "13.200"):
        assert secret not in leaked
