"""The chat socket's frames (pure): parsing hostile frames and hypothesis fuzzing, and the
frames sent out; no database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.frames import (
    MAX_CLIENT_ID_CHARS,
    MAX_FRAME_BYTES,
    FrameError,
    Open,
    Ping,
    Send,
    Stop,
    done,
    parse_frame,
    source_cards,
)
from retrieval.pipeline.fusion import Hit, MergedHit
from tests.hostile import HOSTILE_FRAMES

MAX_CHARS = 4000
CODES = {
    "bad_frame",
    "too_large",
    "bad_json",
    "unknown_type",
    "invalid_message",
    "bad_conversation",
}
FUZZ = settings(max_examples=150, deadline=None)


def parse(text: str | None = None, data: bytes | None = None, max_chars: int = MAX_CHARS) -> Any:
    return parse_frame(text, data, max_chars=max_chars)


def check_invariants(frame: object, max_chars: int = MAX_CHARS) -> None:
    """What the consumer may rely on for any frame the parser lets through."""
    assert isinstance(frame, Open | Send | Stop | Ping)
    if isinstance(frame, Send):
        assert 0 < len(frame.text) <= max_chars
        assert frame.text == frame.text.strip()
        assert all(ch in "\n\t" or ch.isprintable() for ch in frame.text)
        frame.text.encode("utf-8")  # no lone surrogate: it can be stored and sent back
        assert len(frame.client_id) <= MAX_CLIENT_ID_CHARS
        assert all(ch.isprintable() for ch in frame.client_id)
        ids = [frame.conversation] if frame.conversation is not None else []
    elif isinstance(frame, Open):
        ids = [frame.conversation]
    elif isinstance(frame, Stop):
        ids = [frame.message_id]
    else:
        ids = []
    for value in ids:
        assert type(value) is int and 0 < value < 2**63


def check_error(error: FrameError) -> None:
    assert error.code in CODES
    assert error.message and len(error.message) <= 200
    error.message.encode("utf-8")


def parse_checked(text: str | None = None, data: bytes | None = None) -> object | None:
    """Parse, asserting the invariants of whichever outcome; None for a refused frame."""
    try:
        frame = parse(text, data)
    except FrameError as error:
        check_error(error)
        return None
    check_invariants(frame)
    return frame


# --- the hostile corpus ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "code"),
    [pytest.param(payload, code, id=name) for name, payload, code in HOSTILE_FRAMES],
)
def test_hostile_frame_is_refused_with_a_clear_code(payload: str | bytes, code: str) -> None:
    with pytest.raises(FrameError) as info:
        if isinstance(payload, bytes):
            parse(data=payload)
        else:
            parse(payload)
    assert info.value.code == code
    check_error(info.value)


def test_valid_frames_are_typed() -> None:
    assert parse('{"type": "ping"}') == Ping()
    assert parse('{"type": "open", "conversation": 7}') == Open(conversation=7)
    assert parse('{"type": "stop", "message_id": 9}') == Stop(message_id=9)
    sent = parse(
        json.dumps(
            {"type": "message", "conversation": None, "text": " oi\x00 ", "client_id": "c-1"}
        )
    )
    assert sent == Send(conversation=None, text="oi", client_id="c-1")


def test_frame_of_exactly_the_cap_is_parsed_and_one_byte_more_is_not() -> None:
    head = '{"type": "ping", "pad": "'
    exact = head + "x" * (MAX_FRAME_BYTES - len(head) - 2) + '"}'
    assert len(exact.encode()) == MAX_FRAME_BYTES
    assert parse(exact) == Ping()
    with pytest.raises(FrameError, match="too large"):
        parse(exact[:-2] + 'x"}')


def test_client_id_is_printable_and_bounded() -> None:
    frame = parse(_message(client_id="\ud800<b>\x00" + "z" * 500))
    assert isinstance(frame, Send)
    assert frame.client_id == "<b>" + "z" * (MAX_CLIENT_ID_CHARS - 3)
    assert parse(_message(client_id={"nested": [1]})).client_id == ""
    assert parse(_message(client_id=True)).client_id == ""
    assert parse(_message(client_id=12)).client_id == "12"


def test_unknown_type_is_echoed_short_and_printable() -> None:
    with pytest.raises(FrameError) as info:
        parse(json.dumps({"type": "\x1b[2J" + "A" * 5000}))
    assert info.value.code == "unknown_type"
    assert "\x1b" not in info.value.message and len(info.value.message) < 60


def _message(**fields: Any) -> str:
    return json.dumps({"type": "message", "conversation": None, "text": "oi", **fields})


# --- fuzzing --------------------------------------------------------------------------------------

ANY_CHARS = st.characters(exclude_categories=())  # surrogates and controls included
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(ANY_CHARS, max_size=40)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=15,
)
TYPES = st.sampled_from(["open", "message", "stop", "ping", "MESSAGE", "", "delete"]) | st.text(
    ANY_CHARS, max_size=10
)
FIELDS = st.sampled_from(["conversation", "text", "message_id", "client_id", "type", "x"])
FRAMES = st.builds(
    lambda kind, extra: {"type": kind, **extra},
    TYPES | JSON_VALUES,
    st.dictionaries(FIELDS, JSON_VALUES | st.text(ANY_CHARS, max_size=300), max_size=5),
)


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


@FUZZ
@given(st.text(ANY_CHARS, max_size=500))
def test_arbitrary_text_only_ever_raises_frame_error(text: str) -> None:
    parse_checked(text)


@FUZZ
@given(st.binary(max_size=500))
def test_any_binary_frame_is_refused(data: bytes) -> None:
    with pytest.raises(FrameError) as info:
        parse(data=data)
    assert info.value.code == "bad_frame"


@FUZZ
@given(FRAMES)
def test_structured_frames_parse_or_fail_cleanly(frame: dict[str, Any]) -> None:
    parse_checked(_dumps(frame))


@FUZZ
@given(JSON_VALUES)
def test_any_json_value_parses_or_fails_cleanly(value: object) -> None:
    parse_checked(_dumps(value))


@FUZZ
@given(depth=st.integers(1, 40_000), opener=st.sampled_from(["[", '{"a":']))
def test_nesting_of_any_depth_fails_cleanly(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    body = opener * depth + "1" + closer * depth
    parse_checked('{"type": "message", "text": ' + body + "}")
    parse_checked(body)


@FUZZ
@given(size=st.integers(MAX_FRAME_BYTES + 1, 4 * MAX_FRAME_BYTES), char=st.sampled_from("aç€😀"))
def test_anything_over_the_cap_is_too_large(size: int, char: str) -> None:
    text = char * (size // len(char.encode()) + 1)
    with pytest.raises(FrameError) as info:
        parse(text)
    assert info.value.code == "too_large"


@FUZZ
@given(
    text=st.text(ANY_CHARS, min_size=1, max_size=200),
    conversation=st.none() | st.integers(1, 2**63 - 1),
    client_id=st.text(ANY_CHARS, max_size=100),
)
def test_message_frames_keep_exactly_the_printable_text(
    text: str, conversation: int | None, client_id: str
) -> None:
    raw = {"type": "message", "conversation": conversation, "text": text, "client_id": client_id}
    expected = "".join(ch for ch in text if ch in "\n\t" or ch.isprintable()).strip()
    try:
        frame = parse(_dumps(raw), max_chars=200)
    except FrameError as error:
        assert error.code in {"invalid_message", "too_large"}
        assert not expected or error.code == "too_large"
        return
    assert frame == Send(
        conversation=conversation,
        text=expected,
        client_id="".join(ch for ch in client_id if ch.isprintable())[:MAX_CLIENT_ID_CHARS],
    )


def test_source_cards_number_the_passages_and_link_each_to_its_passage() -> None:
    text = "O vale-refeição   é pago\nem dias úteis. " * 20
    hits = [
        MergedHit(Hit(11, 1, "pt/vr", "Vale", "Valor", text, 0, "", 1, 2, 0.9), 0.03),
        MergedHit(Hit(12, 2, "pt/va", "Alimentação", "", "curto", 0, "", None, 1, 0.5), 0.02),
    ]
    cards = source_cards(hits, document_url=lambda document_id: f"/documents/{document_id}/")
    assert [c["n"] for c in cards] == [1, 2]
    assert cards[0]["url"] == "/documents/1/?chunk=11#chunk-11"
    assert cards[0]["snippet"].endswith("…") and len(cards[0]["snippet"]) == 281
    assert "  " not in cards[0]["snippet"] and "\n" not in cards[0]["snippet"]
    assert (cards[1]["snippet"], cards[1]["section"], cards[1]["title"]) == (
        "curto",
        "",
        "Alimentação",
    )


def test_done_names_small_talk_only_when_it_was() -> None:
    answer = done(
        answer_id=2, reply_to=1, status="complete", text="Oi", extractive=True, timings_ms={}
    )
    assert "small_talk" not in answer and list(answer)[-1] == "timings_ms"
    thanks = done(
        answer_id=2,
        reply_to=1,
        status="complete",
        text="De nada!",
        extractive=False,
        small_talk="thanks",
        timings_ms={"to_done": 3.0},
    )
    assert thanks["small_talk"] == "thanks" and thanks["timings_ms"] == {"to_done": 3.0}
