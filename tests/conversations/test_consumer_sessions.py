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
from conversations.models import Conversation
from tests.support import WS_WAIT_S, database_url, manage, ws_pong, ws_until

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
