"""One user's flood of sockets or of frames is bounded (issue 14, hardening).

The attack: one signed-in user could open any number of sockets to /ws/chat/ and hold them,
and send `open` (or `stop`, or a message into someone else's conversation) in a tight loop,
each frame costing a session check and database reads. Here each attack runs through the
real ASGI app, the real database and its cache table, and again with Redis as the cache
(CHATRAG_TEST_REDIS_URL); tests/conversations/test_live_processes.py runs the cap across two
daphne processes, one of which freezes.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from django.core.cache import cache

from conversations import consumers, live
from conversations.models import Conversation, Message
from tests.support import WS_WAIT_S, ws_communicator, ws_connected, ws_pong, ws_until

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.asyncio,
]
REDIS_URL = os.environ.get("CHATRAG_TEST_REDIS_URL", "")


@pytest_asyncio.fixture(params=["database", pytest.param("redis", marks=pytest.mark.redis)])
async def cache_mode(request: Any, settings: Any, ws_settled: None) -> AsyncIterator[str]:
    """The shared cache the places and allowances live in: the database's, or Redis."""
    if request.param == "redis":
        if not REDIS_URL:
            pytest.skip("set CHATRAG_TEST_REDIS_URL to a Redis server to run the Redis mode")
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": REDIS_URL,
                "KEY_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
            }
        }
    yield request.param
    await cache.aclear()


async def _refused_for_the_cap(user: Any, cap: int) -> None:
    """A socket beyond the cap is accepted only to say why, then closed with 4429."""
    socket = await ws_communicator(user)
    connected, _ = await socket.connect(timeout=WS_WAIT_S)
    assert connected
    error = await socket.receive_json_from(timeout=WS_WAIT_S)
    assert (error["type"], error["code"]) == ("error", "too_many_sockets"), error
    assert f"at most {cap}" in error["message"]
    closed = await socket.receive_output(timeout=WS_WAIT_S)
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_TOO_MANY_SOCKETS}
    # Whatever it sends before it is gone is answered by nothing.
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def _accepted(socket: Any) -> bool:
    """True if the socket is in (a ping answered); False if it was refused for the cap."""
    await socket.send_json_to({"type": "ping"})
    frame = await socket.receive_json_from(timeout=WS_WAIT_S)
    if frame == {"type": "pong"}:
        return True
    assert frame["code"] == "too_many_sockets", frame
    await socket.disconnect()
    return False


async def test_sockets_over_the_cap_are_refused_and_a_closed_one_frees_its_place(
    cache_mode: str, personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_MAX_SOCKETS_PER_USER = 3
    ana = personas["ana"]
    sockets = [await ws_connected(ana) for _ in range(3)]
    for socket in sockets:
        await ws_pong(socket)

    await _refused_for_the_cap(ana, 3)
    await _refused_for_the_cap(ana, 3)  # the refused one took no place, and freed none
    carlos = await ws_connected(personas["carlos"])  # another user has places of his own
    await ws_pong(carlos)

    await sockets.pop(0).disconnect()  # a tab closed: its place is free at once
    sockets.append(await ws_connected(ana))
    for socket in sockets:
        await ws_pong(socket)
    await _refused_for_the_cap(ana, 3)
    for socket in [*sockets, carlos]:
        await socket.disconnect()


async def test_a_place_left_by_a_dead_process_expires_and_open_sockets_keep_theirs(
    cache_mode: str, personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_MAX_SOCKETS_PER_USER = 2
    settings.CHATRAG_SOCKET_SLOT_SECONDS = 3  # refreshed every second by an open socket
    ana = personas["ana"]
    # A process that died with one of Ana's sockets open: nothing will ever free its place.
    dead = live.SocketSlot(ana.pk, places=2, seconds=3)
    assert await database_sync_to_async(dead.take)()
    started = time.monotonic()
    alive = await ws_connected(ana)
    await ws_pong(alive)
    await _refused_for_the_cap(ana, 2)

    while True:  # the dead one's place expires; the live one's is refreshed meanwhile
        assert time.monotonic() - started < WS_WAIT_S, "the dead socket's place never expired"
        newcomer = await ws_connected(ana)
        if await _accepted(newcomer):
            break
        await asyncio.sleep(0.5)

    # Past twice the places' lifetime, both open sockets still hold theirs.
    await asyncio.sleep(max(0.0, started + 7 - time.monotonic()))
    await _refused_for_the_cap(ana, 2)
    for socket in (alive, newcomer):
        await ws_pong(socket)
        await socket.disconnect()


async def test_a_socket_whose_place_was_taken_meanwhile_is_closed_when_none_is_free(
    cache_mode: str, personas: dict[str, Any], settings: Any
) -> None:
    """Its process froze for longer than a place lasts (or the cache was emptied), and
    another socket took the place: at its next refresh it finds none and closes."""
    settings.CHATRAG_MAX_SOCKETS_PER_USER = 1
    settings.CHATRAG_SOCKET_SLOT_SECONDS = 3
    ana = personas["ana"]
    frozen = await ws_connected(ana)
    await ws_pong(frozen)
    await cache.aclear()
    other = live.SocketSlot(ana.pk, places=1, seconds=30)
    assert await database_sync_to_async(other.take)()

    error = await frozen.receive_json_from(timeout=WS_WAIT_S)
    assert (error["type"], error["code"]) == ("error", "too_many_sockets"), error
    closed = await frozen.receive_output(timeout=WS_WAIT_S)
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_TOO_MANY_SOCKETS}
    await frozen.disconnect()
    assert await database_sync_to_async(cache.get)(other.key) == other.token  # not freed


@database_sync_to_async
def _conversation_with_a_turn(user: Any) -> tuple[int, int]:
    conversation = Conversation.objects.create(owner=user, title="férias")
    question = Message.objects.create(conversation=conversation, role="user", text="férias?")
    return conversation.id, question.id


@pytest.mark.parametrize("kind", ["open", "stop", "message-not-hers"])
async def test_a_flood_of_frames_is_refused_past_the_allowance_and_the_socket_stays(
    cache_mode: str, personas: dict[str, Any], settings: Any, kind: str
) -> None:
    settings.CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE = 5
    ana, carlos = personas["ana"], personas["carlos"]
    conversation, question = await _conversation_with_a_turn(ana)
    carlos_conversation, _ = await _conversation_with_a_turn(carlos)
    frame = {
        "open": {"type": "open", "conversation": conversation},
        "stop": {"type": "stop", "message_id": question},
        "message-not-hers": {"type": "message", "conversation": carlos_conversation, "text": "oi"},
    }[kind]
    socket = await ws_connected(ana)
    for _ in range(30):
        await socket.send_json_to(frame)
    await socket.send_json_to({"type": "ping"})
    replies = []
    while (reply := await socket.receive_json_from(timeout=WS_WAIT_S))["type"] != "pong":
        replies.append((reply["type"], reply.get("code")))
    if kind == "message-not-hers":  # counted once refused: the sixth is the one over
        assert replies == [("error", "not_found")] * 6 + [("error", "rate_limited")] * 24
    else:  # counted before anything reads the database
        assert replies == [("error", "rate_limited")] * 25
    assert "wait a minute" in await _refused_message(socket, frame)
    await ws_pong(socket)  # pings are never counted: the socket stays usable

    # The allowance is the user's, on every socket: a new one is refused too ...
    second = await ws_connected(ana)
    await second.send_json_to({"type": "open", "conversation": conversation})
    assert (await second.receive_json_from(timeout=WS_WAIT_S))["code"] == "rate_limited"
    # ... and another user's is untouched.
    other = await ws_connected(carlos)
    await other.send_json_to({"type": "open", "conversation": carlos_conversation})
    await ws_pong(other)  # nothing but the pong: the open was served
    for each in (socket, second, other):
        await each.disconnect()


async def _refused_message(socket: Any, frame: dict[str, Any]) -> str:
    await socket.send_json_to(frame)
    error = await socket.receive_json_from(timeout=WS_WAIT_S)
    assert error["code"] == "rate_limited", error
    return str(error["message"])


async def test_a_refused_socket_asks_the_cache_again_only_after_the_hold(
    cache_mode: str, personas: dict[str, Any], settings: Any, monkeypatch: Any
) -> None:
    """Asking the database cache costs more than the frame refused: a flooding socket asks
    once per REFUSED_HOLD_S, and is let through again once the allowance has room."""
    monkeypatch.setattr(consumers, "REFUSED_HOLD_S", 1.0)
    settings.CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE = 1
    ana = personas["ana"]
    conversation, _ = await _conversation_with_a_turn(ana)
    socket = await ws_connected(ana)
    frame = {"type": "open", "conversation": conversation}
    await socket.send_json_to(frame)
    await ws_pong(socket)  # served
    await _refused_message(socket, frame)
    await cache.aclear()  # the allowance has room again, but this socket does not ask yet
    await _refused_message(socket, frame)
    await asyncio.sleep(1.1)
    await socket.send_json_to(frame)
    await ws_pong(socket)  # served
    await socket.disconnect()


async def test_an_accepted_message_uses_only_the_message_allowance(
    cache_mode: str, personas: dict[str, Any], settings: Any
) -> None:
    """Each count is a write with the database cache: an accepted message costs one."""
    settings.CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE = 1
    socket = await ws_connected(personas["ana"])
    conversation = None
    for text in ("quantos dias de férias?", "e o vale-refeição?"):
        await socket.send_json_to({"type": "message", "conversation": conversation, "text": text})
        frames = await ws_until(socket, "done", "clarify", "error")
        assert [f for f in frames if f["type"] == "error"] == []
        conversation = next(f["conversation"] for f in frames if f["type"] == "accepted")
    await socket.send_json_to({"type": "open", "conversation": conversation})
    await ws_pong(socket)  # served: the frame allowance's one frame
    assert "wait a minute" in await _refused_message(
        socket, {"type": "open", "conversation": conversation}
    )
    await socket.disconnect()
