"""Parse and validate the chat WebSocket's incoming frames (pure: no I/O, no Django).

- Every way a frame can be wrong is a `FrameError` with a stable `code` the browser can act on
  and a short message; nothing else is ever raised, whatever the client sends.
- The size cap is checked before parsing, so a huge or deeply nested frame costs no parsing.
- Ids must be real JSON integers (not strings, not booleans); the user's text is cleaned of
  control and invisible characters before its length is checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

MAX_FRAME_BYTES: Final = 64 * 1024
MAX_CLIENT_ID_CHARS: Final = 64


class InvalidMessage(ValueError):
    """The user's message cannot be accepted (empty, too long, not text)."""


class FrameError(ValueError):
    """A frame that cannot be acted on; `code` names why (sent to the client as is)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Open:
    """Follow a conversation: its live answers are sent as snapshots, then as deltas."""

    conversation: int


@dataclass(frozen=True)
class Send:
    """A new user message, in an existing conversation or (None) in a new one."""

    conversation: int | None
    text: str
    client_id: str = ""


@dataclass(frozen=True)
class Stop:
    """Stop the answer being written to this user message."""

    message_id: int


@dataclass(frozen=True)
class Ping:
    pass


Frame = Open | Send | Stop | Ping


def clean_user_text(text: object, *, max_chars: int) -> str:
    """Validate a user's message: text, not blank, within the size limit, no control chars."""
    if not isinstance(text, str):
        raise InvalidMessage("message must be text")
    cleaned = "".join(ch for ch in text if ch in "\n\t" or ch.isprintable()).strip()
    if not cleaned:
        raise InvalidMessage("message is empty")
    if len(cleaned) > max_chars:
        raise InvalidMessage(f"message is too long ({len(cleaned)} > {max_chars} characters)")
    return cleaned


def _is_id(value: object) -> bool:
    # JSON true/false decode to bool, a subclass of int: never an id.
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def _client_id(value: object) -> str:
    """The client's own tag for a message, echoed back: printable text only, bounded.

    A lone surrogate echoed back would make the server fail to encode the reply.
    """
    if not isinstance(value, str | int) or isinstance(value, bool):
        return ""
    text = str(value)[: MAX_CLIENT_ID_CHARS * 2]
    return "".join(ch for ch in text if ch.isprintable())[:MAX_CLIENT_ID_CHARS]


def _decode(text_data: str | None, bytes_data: bytes | None) -> dict[str, object]:
    if bytes_data is not None or text_data is None:
        raise FrameError("bad_frame", "Only JSON text frames are accepted.")
    # Characters, not bytes, arrive here: count what they would take on the wire.
    if len(text_data) > MAX_FRAME_BYTES or (
        len(text_data.encode("utf-8", "surrogatepass")) > MAX_FRAME_BYTES
    ):
        raise FrameError("too_large", "Message too large.")
    try:
        frame = json.loads(text_data)
    except (ValueError, RecursionError):
        raise FrameError("bad_json", "The frame is not valid JSON.") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise FrameError("bad_frame", "A frame must be an object with a 'type'.")
    return frame


def parse_frame(text_data: str | None, bytes_data: bytes | None, *, max_chars: int) -> Frame:
    """Turn what the socket received into a typed frame, or raise `FrameError`."""
    frame = _decode(text_data, bytes_data)
    kind = frame["type"]
    if kind == "ping":
        return Ping()
    if kind == "open":
        conversation = frame.get("conversation")
        if not _is_id(conversation):
            raise FrameError("bad_conversation", "Invalid conversation id.")
        assert isinstance(conversation, int)
        return Open(conversation=conversation)
    if kind == "message":
        try:
            text = clean_user_text(frame.get("text"), max_chars=max_chars)
        except InvalidMessage as exc:
            raise FrameError("invalid_message", str(exc)) from None
        raw_id = frame.get("conversation")
        if raw_id is not None and not _is_id(raw_id):
            raise FrameError("bad_conversation", "Invalid conversation id.")
        assert raw_id is None or isinstance(raw_id, int)
        return Send(conversation=raw_id, text=text, client_id=_client_id(frame.get("client_id")))
    if kind == "stop":
        message_id = frame.get("message_id")
        if not _is_id(message_id):
            raise FrameError("bad_frame", "stop needs a message_id.")
        assert isinstance(message_id, int)
        return Stop(message_id=message_id)
    shown = "".join(ch for ch in str(kind)[:30] if ch.isprintable())
    raise FrameError("unknown_type", f"Unknown frame type {shown!r}.")
