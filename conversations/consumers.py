"""The chat WebSocket: validate, authorise, store the message, start the turn, relay events.

Frames in: {"type": "open", "conversation": id}, {"type": "message", "conversation": id|null,
"text": str}, {"type": "stop", "message_id": id}, {"type": "ping"}.
Frames out: conversation, accepted, rewrite, clarify, sources, delta, done, snapshot, error.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import Http404

from conversations import turns
from conversations.models import Conversation, Message
from conversations.selectors import conversation_get
from conversations.services import (
    InvalidMessage,
    clean_user_text,
    conversation_create,
    message_store_user,
)

MAX_FRAME_BYTES = 64 * 1024
_recent: dict[int, deque[float]] = defaultdict(deque)


def group_name(conversation_id: int) -> str:
    return f"conversation-{conversation_id}"


def rate_limited(user_id: int, *, per_minute: int, now: float | None = None) -> bool:
    """Sliding one-minute window of accepted messages per user (per process)."""
    now = time.monotonic() if now is None else now
    window = _recent[user_id]
    while window and now - window[0] > 60:
        window.popleft()
    if len(window) >= per_minute:
        return True
    window.append(now)
    return False


class ChatConsumer(AsyncWebsocketConsumer):
    groups_joined: set[str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.user = user
        self.groups_joined = set()
        await self.accept()

    async def disconnect(self, code: int) -> None:
        # Running turns are NOT cancelled: they finish and store the answer.
        for group in getattr(self, "groups_joined", set()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if bytes_data is not None or text_data is None:
            await self._error("bad_frame", "Only JSON text frames are accepted.")
            return
        if len(text_data.encode("utf-8", "surrogatepass")) > MAX_FRAME_BYTES:
            await self._error("too_large", "Message too large.")
            return
        try:
            frame = json.loads(text_data)
        except (json.JSONDecodeError, RecursionError):
            await self._error("bad_json", "The frame is not valid JSON.")
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            await self._error("bad_frame", "A frame must be an object with a 'type'.")
            return
        handler = {
            "open": self._open,
            "message": self._message,
            "stop": self._stop,
            "ping": self._ping,
        }.get(frame["type"])
        if handler is None:
            await self._error("unknown_type", f"Unknown frame type {frame['type'][:30]!r}.")
            return
        await handler(frame)

    # --- handlers ---------------------------------------------------------------------------

    async def _ping(self, frame: dict[str, Any]) -> None:
        await self._send({"type": "pong"})

    async def _join(self, conversation_id: int) -> None:
        group = group_name(conversation_id)
        if group not in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.add(group)

    async def _owned(self, raw: object) -> Conversation | None:
        if not isinstance(raw, int) or isinstance(raw, bool):
            await self._error("bad_conversation", "Invalid conversation id.")
            return None
        try:
            return await database_sync_to_async(conversation_get)(
                user=self.user, conversation_id=raw
            )
        except Http404:
            await self._error("not_found", "Conversation not found.")
            return None

    async def _open(self, frame: dict[str, Any]) -> None:
        conversation = await self._owned(frame.get("conversation"))
        if conversation is None:
            return
        await self._join(conversation.id)
        for snapshot in await _live_snapshots(conversation.id):
            await self._send(snapshot)

    async def _message(self, frame: dict[str, Any]) -> None:
        received_at = time.perf_counter()
        try:
            text = clean_user_text(frame.get("text"), max_chars=settings.CHATRAG_MAX_MESSAGE_CHARS)
        except InvalidMessage as exc:
            await self._error("invalid_message", str(exc))
            return
        if rate_limited(self.user.id, per_minute=settings.CHATRAG_RATE_LIMIT_PER_MINUTE):
            await self._error("rate_limited", "Too many messages; wait a minute and try again.")
            return
        raw_id = frame.get("conversation")
        if raw_id is None:
            conversation = await database_sync_to_async(conversation_create)(user=self.user)
            await self._send({"type": "conversation", "id": conversation.id})
        else:
            maybe = await self._owned(raw_id)
            if maybe is None:
                return
            conversation = maybe
        await self._join(conversation.id)
        message = await database_sync_to_async(message_store_user)(
            conversation=conversation, text=text
        )
        await self._send(
            {
                "type": "accepted",
                "message_id": message.id,
                "conversation": conversation.id,
                "client_id": str(frame.get("client_id", ""))[:64],
                "text": text,
            }
        )
        group = group_name(conversation.id)
        layer = self.channel_layer

        async def emit(event: dict[str, Any]) -> None:
            await layer.group_send(group, {"type": "turn.event", "event": event})

        turns.start_turn(message_id=message.id, emit=emit, received_at=received_at)

    async def _stop(self, frame: dict[str, Any]) -> None:
        message_id = frame.get("message_id")
        if not isinstance(message_id, int) or isinstance(message_id, bool):
            await self._error("bad_frame", "stop needs a message_id.")
            return
        owned = await database_sync_to_async(
            Message.objects.filter(pk=message_id, conversation__owner=self.user).exists
        )()
        if not owned:
            await self._error("not_found", "Message not found.")
            return
        turns.request_stop(message_id)

    # --- channel layer events -----------------------------------------------------------------

    async def turn_event(self, event: dict[str, Any]) -> None:
        await self._send(event["event"])

    async def _send(self, payload: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(payload, ensure_ascii=False))

    async def _error(self, code: str, message: str) -> None:
        await self._send({"type": "error", "code": code, "message": message})


@database_sync_to_async
def _live_snapshots(conversation_id: int) -> list[dict[str, Any]]:
    """Answers still being written in this conversation, with their text so far."""
    snapshots = []
    streaming = Message.objects.filter(
        conversation_id=conversation_id,
        role=Message.Role.ASSISTANT,
        status=Message.Status.STREAMING,
    )
    for answer in streaming:
        live = turns.LIVE.get(answer.reply_to_id or 0)
        text = live.text if live is not None else answer.text
        snapshots.append(
            {
                "type": "snapshot",
                "message_id": answer.id,
                "reply_to": answer.reply_to_id,
                "text": text,
                "sources": answer.sources,
            }
        )
    return snapshots
