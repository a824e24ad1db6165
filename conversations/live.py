"""Running turns across web processes: a stop reaches the turn wherever it runs; one allowance.

docker-compose runs several web replicas behind a round-robin proxy, so the socket that asks
to stop a turn is often not on the process running it, and a per-process count would give
each user one allowance per replica.

- Each process keeps the turns it runs in `LIVE` (by user message id): their text so far (a
  reload's snapshot) and the event that stops them.
- While a turn runs, its process's control channel is in the channel-layer group
  `turn-<message id>` (Redis with REDIS_URL, the database otherwise). A stop asked on
  another process goes to that group; the process running the turn stops it and confirms to
  the asking socket (`turn.stop_ack`). A socket that hears no confirmation while the turn is
  still unanswered tells its user the stop did not get through.
- The per-user rate limits live in Django's cache (Redis with REDIS_URL, the database cache
  otherwise), which every process shares: a sliding-window counter per kind (messages; the
  other frames that read the database), a few cache calls per frame whatever the allowance.
- So do a user's places for open sockets (`SocketSlot`): one cache key per place, taken with
  an atomic `add`, refreshed while the socket is open and gone with it, or at its expiry
  when its process died without closing it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer
from django.core.cache import cache

logger = logging.getLogger(__name__)

RATE_WINDOW_S = 60
_RATE_KEY = "rate:{kind}:{user}:{window}"
_SOCKET_KEY = "sockets:{user}:{place}"


@dataclass
class LiveTurn:
    """In-process state of a running turn: lets a reload resync and a user stop it."""

    user_message_id: int
    assistant_message_id: int | None = None
    text: str = ""
    stop: asyncio.Event = field(default_factory=asyncio.Event)


def turn_group(message_id: int) -> str:
    """The group holding the control channel of the process that runs this turn."""
    return f"turn-{message_id}"


class Registry:
    """The turns this process runs, reachable from every process through the channel layer."""

    def __init__(self) -> None:
        self.turns: dict[int, LiveTurn] = {}
        self._layer: Any = None
        self._channel = ""
        self._listener: asyncio.Task[None] | None = None

    def begin(self, message_id: int) -> LiveTurn:
        return self.turns.setdefault(message_id, LiveTurn(user_message_id=message_id))

    def stop_here(self, message_id: int) -> bool:
        """Stop the turn if this process runs it; return whether it does."""
        live = self.turns.get(message_id)
        if live is None:
            return False
        live.stop.set()
        return True

    async def serve(self, message_id: int, work: Any) -> None:
        """Await the turn's coroutine `work` with the turn reachable by stops from anywhere."""
        layer = get_channel_layer()
        channel = ""
        if layer is not None:
            try:
                channel = await self._control_channel(layer)
                await layer.group_add(turn_group(message_id), channel)
            except Exception as exc:  # the layer is down: stops from this process still work
                logger.warning("turn %s: not reachable from other processes: %r", message_id, exc)
                channel = ""
        try:
            await work
        finally:
            if channel:
                try:
                    await layer.group_discard(turn_group(message_id), channel)
                except Exception as exc:  # its row expires with the group
                    logger.warning("turn %s: could not leave its group: %r", message_id, exc)

    async def _control_channel(self, layer: Any) -> str:
        """This process's channel for stops, listened to from its first turn on."""
        listening = (
            self._layer is layer
            and self._listener is not None
            and not self._listener.done()
            and self._listener.get_loop() is asyncio.get_running_loop()
        )
        if not listening:
            self._layer = layer
            self._channel = await layer.new_channel("turns")
            self._listener = asyncio.create_task(self._listen(layer, self._channel))
        return self._channel

    async def _listen(self, layer: Any, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the layer's server is restarting: listen again
                logger.warning("turn control channel: %r; listening again", exc)
                await asyncio.sleep(1)
                continue
            if message.get("type") != "turn.stop":
                continue
            message_id = int(message.get("message_id") or 0)
            reply_to = str(message.get("reply_to") or "")
            if self.stop_here(message_id) and reply_to:
                try:
                    await layer.send(reply_to, {"type": "turn.stop_ack", "message_id": message_id})
                except Exception as exc:  # the turn stops all the same
                    logger.warning("turn %s: stop not confirmed: %r", message_id, exc)


REGISTRY = Registry()
LIVE = REGISTRY.turns


async def stop_request(message_id: int, *, reply_to: str) -> str:
    """Ask the turn to stop wherever it runs: "here", "sent" (await an ack) or "unreachable"."""
    if REGISTRY.stop_here(message_id):
        return "here"
    layer = get_channel_layer()
    if layer is None:
        return "unreachable"
    message = {"type": "turn.stop", "message_id": message_id, "reply_to": reply_to}
    try:
        await layer.group_send(turn_group(message_id), message)
    except Exception as exc:
        logger.warning("turn %s: stop not sent: %r", message_id, exc)
        return "unreachable"
    return "sent"


def rate_limited(
    user_id: int, *, per_minute: int, kind: str = "message", now: float | None = None
) -> bool:
    """Count one of the user's frames of `kind`; True (and not counted) when over `per_minute`.

    A sliding-window counter in the shared cache: this minute's count plus the previous
    minute's, weighted by how much of it still lies within the last RATE_WINDOW_S. Two cache
    calls whatever the allowance (four on a window's first frame, one more when refused),
    counted once for every process that shares the cache (`incr` is atomic in Redis; the
    database cache may miss a count when one user's two frames land on two processes at the
    same instant). A cache that cannot be reached lets the frame through: the chat must not
    stop with it.
    """
    now = time.time() if now is None else now
    window = int(now // RATE_WINDOW_S)
    current = _RATE_KEY.format(kind=kind, user=user_id, window=window)
    previous = _RATE_KEY.format(kind=kind, user=user_id, window=window - 1)
    try:
        # `incr` first: an `add` before every count cost the database cache a failed
        # INSERT (and an error line in PostgreSQL's log) each time.
        try:
            count = int(cache.incr(current))
        except ValueError:  # the window's first frame
            cache.add(current, 0, 2 * RATE_WINDOW_S)
            count = int(cache.incr(current))
        before = int(cache.get(previous) or 0)
        still_counted = 1.0 - (now % RATE_WINDOW_S) / RATE_WINDOW_S
        if count + before * still_counted > per_minute:
            cache.decr(current)  # a refused frame uses up nothing
            return True
        return False
    except Exception as exc:
        logger.error("rate limit not applied (the cache is unreachable): %r", exc)
        return False


class SocketSlot:
    """One of a user's `places` for an open socket, held in the shared cache.

    - Each place is a cache key (`sockets:<user>:<n>`) holding the socket's own token for
      `seconds`: `take` reads all of them at once and `add`s a free one (atomic in Redis;
      in the database cache, the key's primary key makes one of two inserts fail), so two
      calls whatever the number of places.
    - The socket calls `keep` every third of `seconds`; closing it calls `free`. A socket
      whose process died frees its place when the key expires: nothing leaks for longer.
    - A cache that cannot be reached lets the socket through (logged), as the rate limit does.
    - The database cache may, rarely, let one more socket in when a place expired and two
      sockets take it at the same instant (both update the expired row).
    """

    def __init__(self, user_id: int, *, places: int, seconds: int) -> None:
        self.user_id, self.places, self.seconds = user_id, places, seconds
        self.token = uuid.uuid4().hex
        self.key = ""  # the place held, if any

    def _keys(self) -> list[str]:
        return [_SOCKET_KEY.format(user=self.user_id, place=n) for n in range(self.places)]

    def take(self) -> bool:
        """Hold a free place; False when every place is taken."""
        try:
            keys = self._keys()
            taken = cache.get_many(keys)
            for key in keys:
                if key not in taken and cache.add(key, self.token, self.seconds):
                    self.key = key
                    return True
            return False
        except Exception as exc:
            logger.error("socket cap not applied (the cache is unreachable): %r", exc)
            return True

    def keep(self) -> bool:
        """Refresh the place held; take another if it was lost. False: none is free."""
        try:
            if self.key and cache.get(self.key) == self.token:
                cache.touch(self.key, self.seconds)
                return True
        except Exception as exc:  # the place may expire meanwhile; try again next time
            logger.warning("socket place of user %s not refreshed: %r", self.user_id, exc)
            return True
        # Lost (this process froze for longer than `seconds`, the cache was flushed...).
        self.key = ""
        return self.take()

    def free(self) -> None:
        try:
            if self.key and cache.get(self.key) == self.token:
                cache.delete(self.key)
        except Exception as exc:  # it expires on its own
            logger.warning("socket place of user %s not freed: %r", self.user_id, exc)
        self.key = ""
