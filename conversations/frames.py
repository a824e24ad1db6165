"""The chat WebSocket's frames, both ways (pure: no I/O, no Django): the wire protocol.

In: `parse_frame` turns what a socket received into `Open`, `Send`, `Stop` or `Ping`.
- Every way a frame can be wrong is a `FrameError` with a stable `code` the browser can act on
  and a short message; nothing else is ever raised, whatever the client sends.
- The size cap is checked before parsing, so a huge or deeply nested frame costs no parsing.
- Ids must be real JSON integers (not strings, not booleans); the user's text is cleaned of
  control and invisible characters before its length is checked.

Out: one builder per frame the server sends (chat.js reads them): `conversation`,
`accepted`, `snapshot`, `pong` and `error` from the consumer; a turn's `rewrite`, then
`clarify`, or `done` at once (small talk), or `sources`, `delta`..., `done`; or `error`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from retrieval.pipeline.fusion import MergedHit

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


# --- out: what the server sends ---------------------------------------------------------------

Outbound = dict[str, Any]
SNIPPET_CHARS: Final = 280


def pong() -> Outbound:
    return {"type": "pong"}


def error(code: str, message: str) -> Outbound:
    """A frame refused, or the socket's state: `code` names why (`FrameError.code` and the
    consumer's own: rate_limited, not_found, unauthorized, too_many_sockets, stop_failed)."""
    return {"type": "error", "code": code, "message": message}


def conversation(conversation_id: int) -> Outbound:
    """The conversation a first message started (the page takes its address from it)."""
    return {"type": "conversation", "id": conversation_id}


def accepted(*, message_id: int, conversation_id: int, client_id: str, text: str) -> Outbound:
    """The user's message is stored; its turn has started."""
    return {
        "type": "accepted",
        "message_id": message_id,
        "conversation": conversation_id,
        "client_id": client_id,
        "text": text,
    }


def snapshot(
    *, answer_id: int, reply_to: int | None, text: str, sources: Sequence[Mapping[str, Any]]
) -> Outbound:
    """An answer still being written, as far as it goes (a socket that opens its conversation)."""
    return {
        "type": "snapshot",
        "message_id": answer_id,
        "reply_to": reply_to,
        "text": text,
        "sources": sources,
    }


def rewrite(*, message_id: int, block: Mapping[str, Any]) -> Outbound:
    """What the turn will search (`conversations.trace.rewrite_block`), before it searches."""
    return {"type": "rewrite", "message_id": message_id, **block}


def clarify(*, answer_id: int, reply_to: int, question: str, options: Sequence[str]) -> Outbound:
    """The turn asks back; each option is a reading the page offers as a button."""
    return {
        "type": "clarify",
        "message_id": answer_id,
        "reply_to": reply_to,
        "question": question,
        "options": list(options),
    }


def source_cards(
    passages: Sequence[MergedHit], *, document_url: Callable[[int], str]
) -> list[Outbound]:
    """The numbered source cards of an answer ([1]..[n], as its citations number them);
    `document_url(document_id)` is the document page's path. Stored with the answer too."""
    cards = []
    for number, item in enumerate(passages, start=1):
        hit = item.hit
        snippet = " ".join(hit.text.split())
        cards.append(
            {
                "n": number,
                "document_id": hit.document_id,
                "chunk_id": hit.chunk_id,
                "title": hit.title,
                "section": hit.heading,
                "snippet": snippet[:SNIPPET_CHARS] + ("…" if len(snippet) > SNIPPET_CHARS else ""),
                "url": f"{document_url(hit.document_id)}?chunk={hit.chunk_id}#chunk-{hit.chunk_id}",
            }
        )
    return cards


def sources(*, answer_id: int, reply_to: int, cards: Sequence[Mapping[str, Any]]) -> Outbound:
    """The passages the answer is written from, before its first word."""
    return {"type": "sources", "message_id": answer_id, "reply_to": reply_to, "sources": cards}


def delta(*, answer_id: int, offset: int, piece: str) -> Outbound:
    """A piece of the answer; `offset` is where it starts in the text (a snapshot skips)."""
    return {"type": "delta", "message_id": answer_id, "offset": offset, "delta": piece}


def done(
    *,
    answer_id: int,
    reply_to: int,
    status: str,
    text: str,
    extractive: bool,
    timings_ms: Mapping[str, float],
    small_talk: str | None = None,
) -> Outbound:
    """The turn's end, stored before it goes out: its whole answer and status."""
    frame: Outbound = {
        "type": "done",
        "message_id": answer_id,
        "reply_to": reply_to,
        "status": status,
        "text": text,
        "extractive": extractive,
    }
    if small_talk is not None:
        frame["small_talk"] = small_talk
    frame["timings_ms"] = timings_ms
    return frame


def turn_error(*, reply_to: int, message: str, detail: str) -> Outbound:
    """The turn failed: the user's message is kept, the page offers to ask again."""
    return {"type": "error", "reply_to": reply_to, "message": message, "detail": detail}
