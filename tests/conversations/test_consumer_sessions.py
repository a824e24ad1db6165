"""A session that ends closes its sockets at once, server side (issue 14, finding 3).

The attack: a socket that only pings stayed open after logout and `is_active=False`; when the
same user asked in that conversation from another session, the old socket received the
`rewrite` frame (the raw question), the sources and the answer. Each test here holds such an
idle socket, ends its session the way the attack did, and checks that the socket is closed
without sending another frame, in both channel-layer modes (the signal travels through the
layer, so it reaches sockets on any process; one test ends the session from another process).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client

from chatrag.asgi import application
from conversations.models import Conversation, Message
from tests.support import (
    WS_WAIT_S,
    database_url,
    manage,
    statements_counted,
    ws_pong,
    ws_until,
)

pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.asyncio,
]
REDIS_URL = os.environ.get("CHATRAG_TEST_REDIS_URL", "")
QUESTION = "meu CPF é 529.982.247-25, qual o prazo do reembolso?"


@pytest_asyncio.fixture(params=["postgres", "redis"])
async def layer_mode(request: Any, settings: Any, ws_settled: None) -> AsyncIterator[str]:
    if request.param == "redis":
        if not REDIS_URL:
            pytest.skip("set CHATRAG_TEST_REDIS_URL to a Redis server to run the Redis mode")
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [REDIS_URL], "prefix": f"chatrag-test-{uuid.uuid4().hex[:8]}"},
            }
        }
        channel_layers.backends = {}
    yield request.param
    if request.param == "redis":
        layer = channel_layers.backends.get("default")
        if layer is not None:
            await layer.flush()
            await layer.close_pools()


class Session_:
    """One browser: a logged-in test client and a socket opened with its cookie."""

    def __init__(self, client: Client, socket: WebsocketCommunicator) -> None:
        self.client, self.socket = client, socket

    @property
    def key(self) -> str:
        return str(self.client.cookies["sessionid"].value)


async def _browser(user: Any) -> Session_:
    client = Client()
    await sync_to_async(client.force_login)(user)
    key = client.cookies["sessionid"].value
    socket = WebsocketCommunicator(
        application,
        "/ws/chat/",
        headers=[
            (b"host", b"127.0.0.1:8000"),
            (b"origin", b"http://127.0.0.1:8000"),
            (b"cookie", f"sessionid={key}".encode()),
        ],
    )
    connected, code = await socket.connect(timeout=WS_WAIT_S)
    assert connected, code
    return Session_(client, socket)


async def _closed_at_once(socket: WebsocketCommunicator) -> None:
    """The socket says why, closes, and nothing else: no frame of anyone's turn."""
    frame = await socket.receive_json_from(timeout=WS_WAIT_S)
    assert frame["type"] == "error" and frame["code"] == "unauthorized", frame
    closed = await socket.receive_output(timeout=WS_WAIT_S)
    assert closed == {"type": "websocket.close", "code": 4401}
    assert await socket.receive_nothing(timeout=0.3)


async def _asked_elsewhere(asker: Session_, conversation: int) -> None:
    await asker.socket.send_json_to(
        {"type": "message", "conversation": conversation, "text": QUESTION}
    )
    await ws_until(asker.socket, "done", "clarify", "error")


async def _idle_in_a_conversation(user: Any) -> tuple[Session_, int]:
    conversation = await database_sync_to_async(Conversation.objects.create)(
        owner=user, title="reembolso"
    )
    idle = await _browser(user)
    await idle.socket.send_json_to({"type": "open", "conversation": conversation.id})
    await ws_pong(idle.socket)  # it follows the conversation now, and only pings
    return idle, conversation.id


async def test_sign_out_closes_that_sessions_sockets_at_once(
    layer_mode: str, personas: dict[str, Any]
) -> None:
    ana = personas["ana"]
    idle, conversation = await _idle_in_a_conversation(ana)
    other = await _browser(ana)

    response = await sync_to_async(idle.client.post)("/logout/")
    assert response.status_code == 302
    await _closed_at_once(idle.socket)

    # The same user asks from her other session: the signed-out socket hears nothing.
    await _asked_elsewhere(other, conversation)
    assert await idle.socket.receive_nothing(timeout=0.5)
    await ws_pong(other.socket)  # the other session was not signed out
    await other.socket.disconnect()
    await idle.socket.disconnect()


async def test_deactivation_closes_every_socket_of_the_user(
    layer_mode: str, personas: dict[str, Any]
) -> None:
    ana = personas["ana"]
    first, _ = await _idle_in_a_conversation(ana)
    second = await _browser(ana)
    rita = await _browser(personas["rita"])
    ana.is_active = False
    await database_sync_to_async(ana.save)()
    await _closed_at_once(first.socket)
    await _closed_at_once(second.socket)
    await ws_pong(rita.socket)  # someone else's socket is untouched
    for browser in (rita, first, second):
        await browser.socket.disconnect()


async def test_password_change_closes_the_sessions_it_ended(
    layer_mode: str, personas: dict[str, Any]
) -> None:
    ana = personas["ana"]
    idle = await _browser(ana)
    ana.set_password("a-new-password-2026")
    await database_sync_to_async(ana.save)()
    await _closed_at_once(idle.socket)
    await idle.socket.disconnect()


async def test_a_session_ended_without_a_signal_gets_no_frame_of_a_turn(
    layer_mode: str, personas: dict[str, Any]
) -> None:
    """A session deleted in bulk sends no signal: the socket checks before relaying a turn."""
    ana = personas["ana"]
    idle, conversation = await _idle_in_a_conversation(ana)
    other = await _browser(ana)
    await database_sync_to_async(Session.objects.filter(session_key=idle.key).delete)()
    await _asked_elsewhere(other, conversation)
    await _closed_at_once(idle.socket)  # an error and the close: no rewrite, sources, answer
    assert await idle.socket.receive_nothing(timeout=0.5)
    await other.socket.disconnect()
    await idle.socket.disconnect()


async def test_deactivation_from_another_process_closes_the_socket(
    personas: dict[str, Any], ws_settled: None
) -> None:
    """The admin deactivates her in another process (a web replica, a shell)."""
    idle = await _browser(personas["ana"])
    env = {
        **os.environ,
        "CHATRAG_DEBUG": "1",
        "DATABASE_URL": database_url(connection.settings_dict),
    }
    env.pop("REDIS_URL", None)
    script = (
        "from django.contrib.auth.models import User; u = User.objects.get(username='ana'); "
        "u.is_active = False; u.save()"
    )
    await sync_to_async(manage)(env, "shell", "-c", script)
    await _closed_at_once(idle.socket)
    await idle.socket.disconnect()


# --- every frame that does work checks the session first (exactly, whatever it costs) -----------
#
# The signals above close a socket as soon as its session ends, but they travel through the
# channel layer: a frame sent right after signing out can reach the socket before the signal,
# and a session changed without a signal (a queryset update, a raw delete) sends none. So a
# frame is answered only after reading the session as it is now.

FRAMES = {
    "open": lambda conversation: {"type": "open", "conversation": conversation},
    "message": lambda conversation: {
        "type": "message",
        "conversation": conversation,
        "text": QUESTION,
    },
    "stop": lambda conversation: {"type": "stop", "message_id": 1},
}


@pytest.mark.parametrize("frame", sorted(FRAMES))
async def test_a_frame_sent_right_after_signing_out_gets_no_reply(
    layer_mode: str, personas: dict[str, Any], frame: str
) -> None:
    idle, conversation = await _idle_in_a_conversation(personas["ana"])
    response = await sync_to_async(idle.client.post)("/logout/")
    assert response.status_code == 302
    await idle.socket.send_json_to(FRAMES[frame](conversation))
    await _closed_at_once(idle.socket)  # no accepted, snapshot, not_found...
    stored = Message.objects.filter(conversation_id=conversation).exists
    assert not await database_sync_to_async(stored)()  # nor any work done
    await idle.socket.disconnect()


def _password_changed_quietly(user: Any) -> None:
    """No post_save: a queryset update, as a script or a migration would do it."""
    user.set_password("changed-behind-its-back-2026")
    type(user).objects.filter(pk=user.pk).update(password=user.password)


def _deactivated_quietly(user: Any) -> None:
    type(user).objects.filter(pk=user.pk).update(is_active=False)


@pytest.mark.parametrize("change", [_password_changed_quietly, _deactivated_quietly])
async def test_a_user_changed_without_a_signal_gets_no_reply_to_the_next_frame(
    personas: dict[str, Any], ws_settled: None, change: Any
) -> None:
    ana = personas["ana"]
    idle, conversation = await _idle_in_a_conversation(ana)
    await idle.socket.send_json_to(FRAMES["open"](conversation))  # checked, and still fine
    await ws_pong(idle.socket)
    await database_sync_to_async(change)(ana)
    await idle.socket.send_json_to(FRAMES["message"](conversation))
    await _closed_at_once(idle.socket)
    await idle.socket.disconnect()


def _raw_delete_session(key: str) -> None:
    with connection.cursor() as cursor:  # no model, no signal: as a DBA or a restore would
        cursor.execute("DELETE FROM django_session WHERE session_key = %s", [key])


def _expired(key: str) -> None:
    """Its time is up: nobody signs out, nothing is sent."""
    from django.utils import timezone

    Session.objects.filter(session_key=key).update(expire_date=timezone.now())


@pytest.mark.parametrize("end", [_raw_delete_session, _expired])
async def test_a_session_ended_quietly_gets_no_reply_to_the_next_frame(
    personas: dict[str, Any], ws_settled: None, end: Any
) -> None:
    idle, conversation = await _idle_in_a_conversation(personas["ana"])
    await idle.socket.send_json_to(FRAMES["open"](conversation))
    await ws_pong(idle.socket)
    await database_sync_to_async(end)(idle.key)
    await idle.socket.send_json_to(FRAMES["open"](conversation))
    await _closed_at_once(idle.socket)
    await idle.socket.disconnect()


async def test_a_session_changed_by_another_request_keeps_its_socket(
    personas: dict[str, Any], ws_settled: None
) -> None:
    """The session's data may change (the language chosen on a page): still the same user's
    session, so the socket goes on."""
    idle, conversation = await _idle_in_a_conversation(personas["ana"])
    await idle.socket.send_json_to(FRAMES["open"](conversation))
    await ws_pong(idle.socket)

    def set_in_session() -> None:
        from importlib import import_module

        from django.conf import settings

        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=idle.key)
        store["chosen"] = "something"
        store.save()

    await database_sync_to_async(set_in_session)()
    await idle.socket.send_json_to(FRAMES["stop"](conversation))
    frame = await idle.socket.receive_json_from(timeout=WS_WAIT_S)
    assert (frame["type"], frame["code"]) == ("error", "not_found")  # answered, not closed
    await ws_pong(idle.socket)
    await idle.socket.disconnect()


async def test_a_frame_reads_its_session_in_one_statement(
    personas: dict[str, Any], ws_settled: None
) -> None:
    """Nothing changed since the socket's last full check: one query tells (two before, on
    the process's one sync thread), and the frame's own work follows."""
    idle, conversation = await _idle_in_a_conversation(personas["ana"])
    with statements_counted() as seen:
        await idle.socket.send_json_to(FRAMES["open"](conversation))
        await ws_pong(idle.socket)
    (check,) = [s for s in seen.sql if "django_session" in s]
    assert '"auth_user"' in check, seen.listing()  # the user's row in the same statement
    # The check, the conversation's ownership, the answers being written in it; beside them
    # only the frame allowance's count in the cache (`live.rate_limited`, issue 14).
    own = [s for s in seen.sql if '"chatrag_cache"' not in s]
    assert len(own) == 3, seen.listing()
    await idle.socket.disconnect()
