"""The chat WebSocket: validate, authorise, store the message, start the turn, relay events.

Frames in: {"type": "open", "conversation": id}, {"type": "message", "conversation": id|null,
"text": str}, {"type": "stop", "message_id": id}, {"type": "ping"}.
Frames out: conversation, accepted, rewrite, clarify, sources, delta, done, snapshot, error.

- Frames are parsed, validated and built in `conversations.frames` (pure); here: authorise,
  act, send.
- Every socket joins its user's group (`user_group_name`). Signing out closes that session's
  sockets at once, server side; deactivation, a password change or deletion makes every
  socket of the user re-check its session and close if it ended (`sockets_recheck`, sent
  through the channel layer, so it reaches sockets on every process).
- Belt and braces: every action but ping re-checks the session, and so does a socket before
  it relays the first frame of a turn asked from another socket; a socket that found its
  session ended never sends another frame.
- Another user's id is "not_found", exactly like an id that does not exist.
- Stop and the rate limits hold across web processes (`conversations.live`): a stop reaches
  the process running the turn; a stop that cannot be confirmed while the turn is still
  unanswered is told to the user ("stop_failed").
- A user's sockets are capped (CHATRAG_MAX_SOCKETS_PER_USER, on every process together): one
  more is accepted only to say why ("too_many_sockets") and closed with 4429. Its place is
  freed when it closes, or expires when its process dies (`live.SocketSlot`).
- The user's frame allowance (CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE: a flood of `open` cost
  seven database transactions a frame) counts `open` and `stop` before anything reads the
  database, and a message when it is refused (not found, over the message allowance); an
  accepted message counts only in the message allowance, since each count is a write with
  the database cache. Over either, the frame is refused with "rate_limited", and so is every
  frame but ping on that socket for REFUSED_HOLD_S; the socket stays open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from importlib import import_module
from typing import Any

from asgiref.sync import async_to_sync
from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import Q
from django.http import Http404

from conversations import frames, live
from conversations.frames import (
    MAX_FRAME_BYTES,
    FrameError,
    Open,
    Ping,
    Send,
    Stop,
    parse_frame,
)
from conversations.models import Conversation, Message
from conversations.past import NO_LONGER_AVAILABLE, answers_unreadable
from conversations.selectors import SessionSeen, conversation_get, session_unchanged
from conversations.services import conversation_create, message_store_user
from conversations.turn import in_db_thread, start_turn

__all__ = [
    "CLOSE_TOO_MANY_SOCKETS",
    "MAX_FRAME_BYTES",
    "ChatConsumer",
    "group_name",
    "rate_limited",
    "session_sockets_close",
    "sockets_recheck",
    "user_group_name",
]

logger = logging.getLogger(__name__)
rate_limited = live.rate_limited
_session_unchanged = in_db_thread(session_unchanged)
# How long a stop sent to another process may take to be confirmed before the user is told.
STOP_ACK_S = 3.0
# After a refusal, the socket refuses that kind of frame for this long without asking the
# cache again: with the database cache, asking costs more than an `open` itself (measured in
# scripts/load_ws.py --flood), so a flood would cost as much refused as served.
REFUSED_HOLD_S = 2.0
# The close code of a socket over the user's cap (4401: signed out), after its error frame.
CLOSE_TOO_MANY_SOCKETS = 4429


def group_name(conversation_id: int) -> str:
    return f"conversation-{conversation_id}"


def user_group_name(user_id: int) -> str:
    """Every open socket of one user, on any process."""
    return f"user-{user_id}"


def _tell_sockets(user_id: int, event: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group_name(user_id), event)
    except Exception as exc:  # the layer is down: the sockets still re-check at their next frame
        logger.warning("could not reach the sockets of user %s: %r", user_id, exc)


def session_sockets_close(*, user_id: int, session_key: str) -> None:
    """Close, on every process, the user's sockets opened with this session (a sign-out)."""
    _tell_sockets(user_id, {"type": "session.end", "session_key": session_key})


def sockets_recheck(*, user_id: int) -> None:
    """Make the user's sockets re-check their session now and close if it has ended."""
    _tell_sockets(user_id, {"type": "session.recheck"})


RELAY_EVERY_S = 0.1
_RELAYS: set[asyncio.Task[None]] = set()


class GroupRelay:
    """A turn's frames for the user's other sockets, sent to the group in batches.

    One layer message per delta was, under load, the largest cost on the event loop (with
    the Postgres layer, a database statement each). The asking socket still gets each frame
    at once; the others get deltas within RELAY_EVERY_S and every other frame at once, in order.
    """

    def __init__(self, layer: Any, group: str, origin: str) -> None:
        self.layer, self.group, self.origin = layer, group, origin
        self._pending: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None

    async def add(self, event: dict[str, Any]) -> None:
        self._pending.append(event)
        if event.get("type") != "delta":
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(RELAY_EVERY_S, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        _RELAYS.add(task)
        task.add_done_callback(_relayed)

    async def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self._lock:  # batches leave in the order their frames came
            events, self._pending = self._pending, []
            if events:
                message = {"type": "turn.events", "events": events, "origin": self.origin}
                await self.layer.group_send(self.group, message)


def _relayed(task: asyncio.Task[None]) -> None:
    _RELAYS.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("turn frames not relayed to other sockets: %r", task.exception())


class ChatConsumer(AsyncWebsocketConsumer):
    groups_joined: set[str]
    socket_closed = False
    session_ended = False
    session_seen: SessionSeen | None = None  # what the last full session check accepted
    over_cap = False  # closed for want of a place: it sends nothing more either
    slot: live.SocketSlot | None = None
    slot_keeper: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.user = user
        self.groups_joined = set()
        self.snapshot_ends: dict[int, int] = {}  # answer id -> length of the text sent
        # Answers resynced as "no longer available" (`_live_snapshots`): their relayed
        # frames must not send what the snapshot withheld.
        self.answers_hidden: set[int] = set()
        self.turns_checked: set[int] = set()  # turns of other sockets relayed after a check
        self.stops_unconfirmed: dict[int, asyncio.Task[None]] = {}  # by user message id
        self.refused_until: dict[str, float] = {}  # by allowance, see REFUSED_HOLD_S
        self.slot = live.SocketSlot(
            user.pk,
            places=settings.CHATRAG_MAX_SOCKETS_PER_USER,
            seconds=settings.CHATRAG_SOCKET_SLOT_SECONDS,
        )
        placed = await database_sync_to_async(self.slot.take)()
        await self.accept()  # even over the cap: a refused handshake could not say why
        if not placed:
            await self._close_over_cap()
            return
        self.slot_keeper = asyncio.create_task(self._keep_slot(self.slot))
        # Joined after accepting, so a sign-out that races the handshake is caught by the
        # check below rather than missed.
        await self._join_group(user_group_name(user.pk))
        if not await self._session_still_valid():
            await self._end_session()

    async def disconnect(self, code: int) -> None:
        # Running turns are NOT cancelled: they finish and store the answer.
        self.socket_closed = True
        if self.slot_keeper is not None:
            self.slot_keeper.cancel()
        if self.slot is not None and self.slot.key:
            await database_sync_to_async(self.slot.free)()
        for waiting in getattr(self, "stops_unconfirmed", {}).values():
            waiting.cancel()
        for group in getattr(self, "groups_joined", set()):
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception as exc:  # the layer's database is down; its rows expire anyway
                logger.warning("could not leave %s: %r", group, exc)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        received_at = time.perf_counter()
        try:
            frame = parse_frame(text_data, bytes_data, max_chars=settings.CHATRAG_MAX_MESSAGE_CHARS)
        except FrameError as exc:
            await self._error(exc.code, exc.message)
            return
        if self.session_ended or self.over_cap:
            return
        if isinstance(frame, Ping):
            await self._send(frames.pong())
            return
        # Before the session check, which reads the database; a message is counted only
        # if refused (`_message`): an accepted one costs one count, not two.
        if self._held("frame") or (not isinstance(frame, Send) and not await self._frame_allowed()):
            await self._error("rate_limited", "Too many requests; wait a minute and try again.")
            return
        if not await self._session_still_valid():
            await self._end_session()
            return
        if isinstance(frame, Open):
            await self._open(frame)
        elif isinstance(frame, Send):
            await self._message(frame, received_at)
        elif isinstance(frame, Stop):
            await self._stop(frame)

    async def _end_session(self) -> None:
        """Say why once, close, and never send anything again on this socket."""
        if self.session_ended:
            return
        await self._error("unauthorized", "Your session has ended; sign in again.")
        self.session_ended = True
        await self.close(code=4401)

    async def _close_over_cap(self) -> None:
        """Say why once and close: the user's other sockets hold every place."""
        if self.over_cap:
            return
        await self._error(
            "too_many_sockets",
            f"Too many chat windows are open (at most {settings.CHATRAG_MAX_SOCKETS_PER_USER});"
            " close one and this one connects again.",
        )
        self.over_cap = True
        await self.close(code=CLOSE_TOO_MANY_SOCKETS)

    async def _keep_slot(self, slot: live.SocketSlot) -> None:
        """Refresh this socket's place while it is open; close it if the place is lost and
        none is free (its process froze for longer than the place lasts)."""
        while True:
            await asyncio.sleep(slot.seconds / 3)
            try:
                kept = await database_sync_to_async(slot.keep)()
            except Exception as exc:  # keep() reports the cache's own failures itself
                logger.warning("socket place not refreshed: %r", exc)
                continue
            if not kept:
                await self._close_over_cap()
                return

    def _held(self, kind: str) -> bool:
        """This socket was refused `kind` lately: refuse it again without asking the cache."""
        return self.refused_until.get(kind, 0.0) > time.monotonic()

    async def _allowed(self, kind: str, per_minute: int) -> bool:
        """Count the frame in the user's allowance of `kind`, shared by every process; a
        socket refused lately is refused again without asking (REFUSED_HOLD_S)."""
        if self._held(kind):
            return False
        limited = await database_sync_to_async(live.rate_limited)(
            self.user.id, per_minute=per_minute, kind=kind
        )
        if limited:
            self.refused_until[kind] = time.monotonic() + REFUSED_HOLD_S
        return not limited

    async def _frame_allowed(self) -> bool:
        return await self._allowed("frame", settings.CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE)

    async def _session_still_valid(self) -> bool:
        """The session still exists and still belongs to this active user.

        Read as it is now, at every frame that does work: a signal can arrive after the next
        frame, or never (a queryset update, a raw delete). Cheap when nothing changed since
        the last full check: one query on the turns' threads, not the process's one sync
        thread (`selectors.session_unchanged`)."""
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        if not key:
            return False
        seen = self.session_seen
        if seen is not None and await _session_unchanged(
            session_key=key, user_id=self.user.pk, seen=seen
        ):
            return True
        # A fresh store: the scope's one caches what it read when the socket opened.
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
        user = await get_user({"session": store})
        valid = bool(user.is_authenticated and user.pk == self.user.pk)
        self.session_seen = SessionSeen(dict(store.items()), user.password) if valid else None
        return valid

    # --- handlers ---------------------------------------------------------------------------

    async def _join(self, conversation_id: int) -> None:
        await self._join_group(group_name(conversation_id))

    async def _join_group(self, group: str) -> None:
        if group not in self.groups_joined:
            try:
                await self.channel_layer.group_add(group, self.channel_name)
            except Exception as exc:  # the layer is down: this socket still gets its own turns
                logger.warning("could not join %s: %r", group, exc)
                return
            self.groups_joined.add(group)

    async def _owned(self, conversation_id: int) -> Conversation | None:
        try:
            return await database_sync_to_async(conversation_get)(
                user=self.user, conversation_id=conversation_id
            )
        except Http404:
            await self._error("not_found", "Conversation not found.")
            return None

    async def _open(self, frame: Open) -> None:
        conversation = await self._owned(frame.conversation)
        if conversation is None:
            return
        await self._join(conversation.id)
        snapshots, hidden = await _live_snapshots(user=self.user, conversation_id=conversation.id)
        self.answers_hidden |= hidden
        for snapshot in snapshots:
            # Deltas already in the snapshot may still be on their way: they are skipped.
            self.snapshot_ends[snapshot["message_id"]] = len(snapshot["text"])
            await self._send(snapshot)

    async def _message(self, frame: Send, received_at: float) -> None:
        # Ownership first: a refused id must not use up the user's message allowance; it and
        # a message over that allowance use up the frame allowance instead (they read the
        # database, and a flood of them must meet the frame allowance's refusal up front).
        existing: Conversation | None = None
        if frame.conversation is not None:
            existing = await self._owned(frame.conversation)
            if existing is None:
                await self._frame_allowed()
                return
        if not await self._allowed("message", settings.CHATRAG_RATE_LIMIT_PER_MINUTE):
            await self._error("rate_limited", "Too many messages; wait a minute and try again.")
            await self._frame_allowed()
            return
        if existing is None:
            conversation = await database_sync_to_async(conversation_create)(user=self.user)
        else:
            conversation = existing
        await self._join(conversation.id)
        message = await database_sync_to_async(message_store_user)(
            conversation=conversation, text=frame.text
        )
        if existing is None:
            # Only now: the page takes the new conversation's address from this frame, and a
            # reload of that address must find the message in it.
            await self._send(frames.conversation(conversation.id))
        await self._send(
            frames.accepted(
                message_id=message.id,
                conversation_id=conversation.id,
                client_id=frame.client_id,
                text=frame.text,
            )
        )
        relay = GroupRelay(self.channel_layer, group_name(conversation.id), self.channel_name)

        async def emit(event: dict[str, Any]) -> None:
            # The asking socket hears its turn directly, so it does not depend on the layer
            # (with the Postgres layer: on the database being up) nor wait for its round trip;
            # the group carries the frames to the user's other sockets on any process.
            if not self.socket_closed:
                try:
                    await self._send(event)
                except Exception as exc:  # closed under our feet: the turn goes on
                    logger.info("turn frame not sent to its socket: %r", exc)
            await relay.add(event)

        start_turn(message_id=message.id, emit=emit, received_at=received_at)

    async def _stop(self, frame: Stop) -> None:
        owned = await database_sync_to_async(
            Message.objects.filter(pk=frame.message_id, conversation__owner=self.user).exists
        )()
        if not owned:
            await self._error("not_found", "Message not found.")
            return
        outcome = await live.stop_request(frame.message_id, reply_to=self.channel_name)
        if outcome == "sent":  # to the process running it, which confirms (turn_stop_ack)
            previous = self.stops_unconfirmed.pop(frame.message_id, None)
            if previous is not None:
                previous.cancel()
            self.stops_unconfirmed[frame.message_id] = asyncio.create_task(
                self._stop_confirmed_or_told(frame.message_id)
            )
        elif outcome == "unreachable" and await _turn_unanswered(frame.message_id):
            await self._stop_failed()

    async def _stop_confirmed_or_told(self, message_id: int) -> None:
        """No confirmation in STOP_ACK_S while the turn is still unanswered: tell the user."""
        await asyncio.sleep(STOP_ACK_S)
        self.stops_unconfirmed.pop(message_id, None)
        try:
            if not self.socket_closed and await _turn_unanswered(message_id):
                await self._stop_failed()
        except Exception as exc:  # the database or the socket went away meanwhile
            logger.warning("stop of turn %s: could not tell the user: %r", message_id, exc)

    async def _stop_failed(self) -> None:
        # No reply_to: the page shows it as a notice and leaves the turn running as it is.
        await self._error(
            "stop_failed",
            "The answer could not be stopped: the server writing it did not respond. "
            "It will finish on its own.",
        )

    # --- channel layer events -----------------------------------------------------------------

    async def session_end(self, event: dict[str, Any]) -> None:
        """A sign-out: close if this socket was opened with that session."""
        session = self.scope.get("session")
        if getattr(session, "session_key", None) == event.get("session_key"):
            await self._end_session()

    async def session_recheck(self, event: dict[str, Any]) -> None:
        if not self.session_ended and not await self._session_still_valid():
            await self._end_session()

    async def turn_stop_ack(self, event: dict[str, Any]) -> None:
        """The process running the turn has stopped it."""
        waiting = self.stops_unconfirmed.pop(int(event.get("message_id") or 0), None)
        if waiting is not None:
            waiting.cancel()

    async def turn_events(self, event: dict[str, Any]) -> None:
        if event.get("origin") == self.channel_name:
            return  # this socket's own turn: already sent directly
        # A turn asked elsewhere carries the question and the answer: before relaying its
        # first frame, make sure this socket's session is still on (a missed signal, a
        # session deleted in bulk).
        turns_new = {int(i.get("message_id") or 0) for i in event["events"]} - self.turns_checked
        if turns_new and not self.session_ended:
            if not await self._session_still_valid():
                await self._end_session()
            self.turns_checked |= turns_new
        for item in event["events"]:
            answer_id = item.get("message_id", 0)
            if answer_id in self.answers_hidden:
                if item["type"] != "done":
                    continue  # its pieces and sources: the snapshot withheld them
                item = {**item, "text": str(NO_LONGER_AVAILABLE)}
            seen = self.snapshot_ends.get(answer_id, 0)
            if item["type"] == "delta" and item["offset"] + len(item["delta"]) <= seen:
                continue
            await self._send(item)

    async def _send(self, payload: dict[str, Any]) -> None:
        if self.session_ended or self.over_cap:
            return  # nothing more for a session that has ended, whoever asks to send it
        await self.send(text_data=json.dumps(payload, ensure_ascii=False))

    async def _error(self, code: str, message: str) -> None:
        await self._send(frames.error(code, message))


@database_sync_to_async
def _turn_unanswered(message_id: int) -> bool:
    """The turn of this user message has not finished (on whichever process runs it)."""
    question = Q(pk=message_id, status=Message.Status.RECEIVED)
    answer = Q(reply_to_id=message_id, status=Message.Status.STREAMING)
    return Message.objects.filter(question | answer).exists()


@database_sync_to_async
def _live_snapshots(*, user: Any, conversation_id: int) -> tuple[list[dict[str, Any]], set[int]]:
    """Answers still being written in this conversation, with their text so far, as a reload
    of the page shows them; and the ids of those shown as no longer available.

    The page's rule (`conversations.past`, issue 38 finding 12): an answer from a document
    the owner may no longer read is the note, without its text or sources. A resync follows
    it (it sent the text so far and the source cards whatever the owner may read now).
    """
    messages = list(
        Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "id")
    )
    streaming = [
        m
        for m in messages
        if m.role == Message.Role.ASSISTANT and m.status == Message.Status.STREAMING
    ]
    if not streaming:
        return [], set()
    for answer in streaming:
        running = live.LIVE.get(answer.reply_to_id or 0)
        if running is not None:  # this process writes it: the text so far, not the last save
            answer.text = running.text
    hidden = set(answers_unreadable(user=user, messages=messages))
    snapshots = [
        frames.snapshot(
            answer_id=answer.id,
            reply_to=answer.reply_to_id,
            text=str(NO_LONGER_AVAILABLE) if answer.id in hidden else answer.text,
            sources=[] if answer.id in hidden else answer.sources,
        )
        for answer in streaming
    ]
    return snapshots, hidden & {a.id for a in streaming}
