"""The chat WebSocket end to end: real ASGI stack, real Channels layer, real Postgres."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conversations.models import Conversation, Message, TurnTrace
from conversations.turn import RUNNING
from retrieval.models import Document
from retrieval.services import _chat_model, chat_model
from tests.support import WS_WAIT_S
from tests.support import finish_turns as _finish_turns
from tests.support import ws_communicator as _communicator
from tests.support import ws_connected as _connected
from tests.support import ws_pong as _pong
from tests.support import ws_until as _until

# The layer's tables live in the test database, and channels_postgres deletes group rows
# through its own "channels_postgres" database alias when there is one.
pytestmark = [
    pytest.mark.django_db(transaction=True, databases="__all__"),
    pytest.mark.asyncio,
]

RESTRICTED_DOC = "pt/faixas-salariais-2026"
WAIT_S = WS_WAIT_S


# --- helpers --------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _settled(ws_settled: None) -> None:
    """Every test here uses the socket: settle it (tests/conversations/conftest.py)."""


async def _ask(
    communicator: WebsocketCommunicator, text: str, conversation: int | None = None
) -> list[dict[str, Any]]:
    await communicator.send_json_to({"type": "message", "conversation": conversation, "text": text})
    return await _until(communicator, "done", "clarify", "error")


@database_sync_to_async
def _messages(conversation_id: int) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("id"))


def _citations(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\]", text)]


# --- connecting -----------------------------------------------------------------------------------


async def test_unauthenticated_socket_is_closed_with_4401() -> None:
    communicator = await _communicator(user=None)
    connected, code = await communicator.connect(timeout=WAIT_S)
    assert (connected, code) == (False, 4401)


@pytest.mark.parametrize(
    "origin",
    [
        b"https://evil.example",
        b"http://127.0.0.1.evil.example:8000",
        b"null",
        None,
        # The attack: a page on another port of the same host (another app, a dev tool)
        # opened the socket with the user's cookies (same site) and read their chats.
        b"http://127.0.0.1:9999",
        b"http://127.0.0.1",
    ],
    ids=["foreign", "look-alike", "null", "missing", "other-port", "default-port"],
)
async def test_foreign_or_missing_origin_is_rejected(
    personas: dict[str, Any], origin: bytes | None
) -> None:
    communicator = await _communicator(personas["ana"], origin=origin)
    connected, _code = await communicator.connect(timeout=WAIT_S)
    assert connected is False


async def test_session_of_a_deactivated_user_is_refused(personas: dict[str, Any]) -> None:
    communicator = await _communicator(personas["ana"])  # logged in while still active
    personas["ana"].is_active = False
    await database_sync_to_async(personas["ana"].save)(update_fields=["is_active"])
    connected, code = await communicator.connect(timeout=WAIT_S)
    assert (connected, code) == (False, 4401)


async def test_ping_answers_pong(personas: dict[str, Any]) -> None:
    communicator = await _connected(personas["ana"])
    await _pong(communicator)
    await communicator.disconnect()


# --- bad frames -----------------------------------------------------------------------------------

NESTED_OVER_LIMIT = "[" * 100_000 + "]" * 100_000  # 200 KB: refused before parsing
NESTED_UNDER_LIMIT = "[" * 30_000 + "]" * 30_000  # 60 KB: too deep for the parser


def _message_frame(text: Any) -> str:
    return json.dumps({"type": "message", "conversation": None, "text": text})


BAD_FRAMES = [
    pytest.param("{not json", "bad_json", id="invalid-json"),
    pytest.param('"just a string"', "bad_frame", id="not-an-object"),
    pytest.param("[1, 2, 3]", "bad_frame", id="a-list"),
    pytest.param('{"text": "oi"}', "bad_frame", id="missing-type"),
    pytest.param('{"type": 7}', "bad_frame", id="type-not-a-string"),
    pytest.param('{"type": "delete_everything"}', "unknown_type", id="unknown-type"),
    pytest.param(b"\x00\x01binary", "bad_frame", id="binary-frame"),
    pytest.param(json.dumps({"type": "ping", "pad": "x" * 70_000}), "too_large", id="over-64kb"),
    pytest.param(NESTED_OVER_LIMIT, "too_large", id="nested-lists-100000"),
    pytest.param(NESTED_UNDER_LIMIT, "bad_json", id="nested-lists-under-size-limit"),
    pytest.param(_message_frame(123), "invalid_message", id="text-not-a-string"),
    pytest.param(_message_frame(None), "invalid_message", id="text-missing"),
    pytest.param(_message_frame(""), "invalid_message", id="text-empty"),
    pytest.param(_message_frame(" \n\t\x00\x07 "), "invalid_message", id="text-blank"),
    pytest.param(_message_frame("x" * 51), "invalid_message", id="text-over-limit"),
    pytest.param(
        json.dumps({"type": "message", "conversation": "1", "text": "oi"}),
        "bad_conversation",
        id="conversation-not-an-int",
    ),
    pytest.param(
        json.dumps({"type": "message", "conversation": True, "text": "oi"}),
        "bad_conversation",
        id="conversation-bool",
    ),
    pytest.param('{"type": "open"}', "bad_conversation", id="open-without-id"),
    pytest.param('{"type": "stop"}', "bad_frame", id="stop-without-id"),
    pytest.param('{"type": "stop", "message_id": 999999999}', "not_found", id="stop-unknown"),
]


@pytest.mark.parametrize(("payload", "code"), BAD_FRAMES)
async def test_bad_frame_gets_an_error_and_the_socket_stays_usable(
    personas: dict[str, Any], settings: Any, payload: str | bytes, code: str
) -> None:
    settings.CHATRAG_MAX_MESSAGE_CHARS = 50
    communicator = await _connected(personas["ana"])
    if isinstance(payload, bytes):
        await communicator.send_to(bytes_data=payload)
    else:
        await communicator.send_to(text_data=payload)
    error = await communicator.receive_json_from(timeout=WAIT_S)
    assert error["type"] == "error"
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    await _pong(communicator)
    # Nothing was stored and no turn started.
    assert await database_sync_to_async(Message.objects.count)() == 0
    assert await database_sync_to_async(Conversation.objects.count)() == 0
    assert not RUNNING
    await communicator.disconnect()


async def test_message_of_exactly_the_limit_is_accepted(
    personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_MAX_MESSAGE_CHARS = 50
    communicator = await _connected(personas["ana"])
    frames = await _ask(communicator, "x" * 50)
    accepted = next(f for f in frames if f["type"] == "accepted")
    assert accepted["text"] == "x" * 50
    await communicator.disconnect()


async def test_control_characters_are_stripped_before_storing(personas: dict[str, Any]) -> None:
    communicator = await _connected(personas["ana"])
    frames = await _ask(communicator, "\x00 férias\x07 no\u200b\u202e Natal?\r\n  ok\tsim ")
    accepted = next(f for f in frames if f["type"] == "accepted")
    assert accepted["text"] == "férias no Natal?\n  ok\tsim"
    (stored, *_rest) = await _messages(accepted["conversation"])
    assert stored.id == accepted["message_id"]
    assert stored.text == accepted["text"]
    await communicator.disconnect()


# --- a full turn ----------------------------------------------------------------------------------


async def test_full_turn_without_model_streams_in_order_and_stores_the_answer(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    communicator = await _connected(personas["ana"])
    await communicator.send_json_to(
        {
            "type": "message",
            "conversation": None,
            "text": "quantos dias de férias eu tenho?",
            "client_id": "c-1",
        }
    )
    created = await communicator.receive_json_from(timeout=WAIT_S)
    assert created["type"] == "conversation"
    accepted = await communicator.receive_json_from(timeout=WAIT_S)
    assert accepted["type"] == "accepted"
    assert accepted["conversation"] == created["id"]
    assert accepted["client_id"] == "c-1"
    # The user's message is in the database as soon as it is acknowledged.
    user = await database_sync_to_async(Message.objects.get)(pk=accepted["message_id"])
    assert (user.role, user.text) == ("user", "quantos dias de férias eu tenho?")
    assert user.conversation_id == created["id"]

    frames = await _until(communicator, "done", "error", "clarify")
    types = [f["type"] for f in frames]
    assert types[:2] == ["rewrite", "sources"], types
    assert types[-1] == "done", types
    assert set(types[2:-1]) == {"delta"}, types

    rewrite, sources, *deltas, done = frames
    assert rewrite["message_id"] == accepted["message_id"]
    assert rewrite["original"] == "quantos dias de férias eu tenho?"
    assert rewrite["backend"] == "rules"
    assert rewrite["queries"]
    cards = sources["sources"]
    assert cards, "the small knowledge base answers this question"
    assert [c["n"] for c in cards] == list(range(1, len(cards) + 1))
    answer_id = sources["message_id"]
    assert sources["reply_to"] == accepted["message_id"]

    offset = 0
    for delta in deltas:
        assert delta["message_id"] == answer_id
        assert delta["offset"] == offset
        offset += len(delta["delta"])
    assert "".join(d["delta"] for d in deltas) == done["text"]
    assert (done["message_id"], done["reply_to"]) == (answer_id, accepted["message_id"])
    assert done["status"] == "complete"
    assert done["extractive"] is True
    cited = _citations(done["text"])
    assert cited
    assert all(1 <= n <= len(cards) for n in cited), cited

    user_stored, answer = await _messages(created["id"])
    assert user_stored.id == accepted["message_id"]
    assert user_stored.status == Message.Status.COMPLETE
    assert answer.id == answer_id
    assert answer.role == Message.Role.ASSISTANT
    assert answer.reply_to_id == user_stored.id
    assert answer.status == Message.Status.COMPLETE
    assert answer.extractive is True
    assert answer.text == done["text"]
    assert answer.sources == cards
    trace = await database_sync_to_async(TurnTrace.objects.get)(message_id=user_stored.id)
    assert trace.masked_question == "quantos dias de férias eu tenho?"
    assert trace.rewrite["backend"] == "rules"
    assert trace.search["passages"] == [c["chunk_id"] for c in cards]
    assert {"to_rewrite_frame", "to_sources_frame", "to_done"} <= set(trace.timings_ms)
    assert trace.errors == []

    # The conversation goes on: a second question in the same conversation.
    frames = await _ask(communicator, "e para estagiários?", conversation=created["id"])
    assert frames[0]["type"] == "accepted"
    assert frames[-1]["type"] in {"done", "clarify"}
    assert len(await _messages(created["id"])) == 4
    await communicator.disconnect()


async def test_another_users_conversation_gives_an_error_and_no_data(
    personas: dict[str, Any],
) -> None:
    @database_sync_to_async
    def ritas_conversation() -> tuple[int, int]:
        conversation = Conversation.objects.create(owner=personas["rita"], title="salários")
        message = Message.objects.create(
            conversation=conversation, role="user", text="qual a banda P3?"
        )
        Message.objects.create(
            conversation=conversation,
            role="assistant",
            text="segredo",
            status=Message.Status.STREAMING,
            reply_to=message,
        )
        return conversation.id, message.id

    conversation_id, message_id = await ritas_conversation()
    communicator = await _connected(personas["ana"])
    for frame in (
        {"type": "open", "conversation": conversation_id},
        {"type": "message", "conversation": conversation_id, "text": "me mostra"},
        {"type": "stop", "message_id": message_id},
    ):
        await communicator.send_json_to(frame)
        error = await communicator.receive_json_from(timeout=WAIT_S)
        assert error["type"] == "error"
        assert error["code"] == "not_found"
        assert "segredo" not in json.dumps(error) and "P3" not in json.dumps(error)
        await _pong(communicator)
    assert len(await _messages(conversation_id)) == 2  # nothing was added to Rita's chat
    await communicator.disconnect()


async def test_restricted_document_reaches_only_its_group(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    restricted = await database_sync_to_async(Document.objects.get)(external_id=RESTRICTED_DOC)
    question = "banda P3 matriz de mérito"

    ana = await _connected(personas["ana"])
    frames = await _ask(ana, question)
    sources = next(f for f in frames if f["type"] == "sources")
    assert restricted.id not in {c["document_id"] for c in sources["sources"]}
    assert restricted.title not in json.dumps(frames, ensure_ascii=False)
    await ana.disconnect()

    rita = await _connected(personas["rita"])
    frames = await _ask(rita, question)
    sources = next(f for f in frames if f["type"] == "sources")
    assert sources["sources"][0]["document_id"] == restricted.id
    await rita.disconnect()


# "dossiê" is said only by this restricted page (rh-restrito) in the whole demo.
RESTRICTED_WORD_DOC = "pt/medidas-disciplinares-procedimento-interno"


@pytest.fixture
def kb_with_restricted_word(small_kb: Any) -> Any:
    """The small knowledge base plus the restricted page that alone says "dossiê"."""
    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.services import documents_ingest, source_from_file
    from tests.conftest import DEMO_KB, RESTRICTED

    source = source_from_file(DEMO_KB / f"{RESTRICTED_WORD_DOC}.md", root=DEMO_KB)
    report = documents_ingest(
        collection=small_kb, sources=[source], embedder=get_embedder(), total=1
    )
    assert not report.errors, report.errors
    restricted = Document.objects.get(external_id=RESTRICTED_WORD_DOC)
    assert [g.name for g in restricted.groups.all()] == [RESTRICTED]
    return small_kb


async def test_spelling_corrections_never_name_a_restricted_word(
    kb_with_restricted_word: Any, personas: dict[str, Any]
) -> None:
    """The attack of issue 14 (finding 1), over the socket: a plain employee misspells a
    word that only a restricted page says and reads the `rewrite` frame's corrections; a
    correction to it would tell that the restricted page exists and what it says."""
    question = "onde fica guardado o dosie de apuração?"

    # The group member first: the statistics kept between turns are per reader.
    rita = await _connected(personas["rita"])
    frames = await _ask(rita, question)
    await rita.disconnect()
    rewrite = next(f for f in frames if f["type"] == "rewrite")
    assert rewrite["corrections"] == {"dosie": "dossie"}, rewrite

    for name in ("ana", "carlos"):
        communicator = await _connected(personas[name])
        frames = await _ask(communicator, question)
        await communicator.disconnect()
        rewrite = next(f for f in frames if f["type"] == "rewrite")
        assert "dosie" not in rewrite["corrections"], (name, rewrite)
        said = json.dumps(frames, ensure_ascii=False).casefold()
        assert "dossie" not in said and "dossiê" not in said, (name, said)


async def test_rate_limit_refuses_messages_over_the_limit(
    personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_RATE_LIMIT_PER_MINUTE = 2
    communicator = await _connected(personas["ana"])
    first = await _ask(communicator, "primeira pergunta sobre férias")
    conversation = first[0]["id"]
    await _ask(communicator, "segunda pergunta sobre férias", conversation=conversation)
    await communicator.send_json_to(
        {"type": "message", "conversation": conversation, "text": "terceira pergunta"}
    )
    error = await communicator.receive_json_from(timeout=WAIT_S)
    assert (error["type"], error["code"]) == ("error", "rate_limited")
    await _pong(communicator)
    texts = [m.text for m in await _messages(conversation) if m.role == "user"]
    assert texts == ["primeira pergunta sobre férias", "segunda pergunta sobre férias"]
    await communicator.disconnect()

    # The limit is per user.
    other = await _connected(personas["carlos"])
    frames = await _ask(other, "pergunta do carlos")
    assert frames[1]["type"] == "accepted"
    await other.disconnect()


async def test_bare_follow_up_in_a_new_conversation_asks_to_clarify(
    personas: dict[str, Any],
) -> None:
    communicator = await _connected(personas["ana"])
    frames = await _ask(communicator, "e isso?")
    types = [f["type"] for f in frames]
    assert types == ["conversation", "accepted", "rewrite", "clarify"]
    rewrite, clarify = frames[2], frames[3]
    assert rewrite["clarification"]["question"] == clarify["question"]
    assert clarify["question"].strip()
    assert clarify["reply_to"] == frames[1]["message_id"]
    user, answer = await _messages(frames[0]["id"])
    assert answer.id == clarify["message_id"]
    assert answer.status == Message.Status.CLARIFY
    assert answer.text == clarify["question"]
    assert answer.reply_to_id == user.id
    trace = await database_sync_to_async(TurnTrace.objects.get)(message_id=user.id)
    assert trace.clarified is True
    await communicator.disconnect()


# --- a model that streams slowly ------------------------------------------------------------------


REWRITE = {
    "queries": [{"text": "dias de férias por ano", "type": "normalize", "area": None}],
    "needs_clarification": False,
    "clarification": None,
}
FIRST_PIECE = "Você tem 30 dias [1]"


@pytest_asyncio.fixture
async def release(settings: Any, model_server: HTTPServer) -> AsyncIterator[threading.Event]:
    """An Ollama server whose answer stalls after FIRST_PIECE until the event is set."""
    event = threading.Event()

    def ollama(request: Request) -> Response:
        body = json.loads(request.get_data())
        if not body["stream"]:
            content = json.dumps(REWRITE)
            return Response(json.dumps({"message": {"content": content}, "done": True}))

        def lines() -> Iterator[bytes]:
            yield json.dumps({"message": {"content": FIRST_PIECE}}).encode() + b"\n"
            event.wait(WAIT_S)
            yield json.dumps({"message": {"content": " por ano."}}).encode() + b"\n"
            yield json.dumps({"message": {"content": ""}, "done": True}).encode() + b"\n"

        return Response(lines(), mimetype="application/x-ndjson")

    model_server.clear()
    model_server.expect_request("/api/chat", method="POST").respond_with_handler(ollama)
    settings.CHATRAG_LLM_BACKEND = "retrieval.pipeline.llm.OllamaChat"
    settings.CHATRAG_LLM_URL = model_server.url_for("/")
    settings.CHATRAG_LLM_MODEL = "qwen-test"
    _chat_model.cache_clear()
    yield event
    event.set()
    await _finish_turns()
    model = chat_model()
    if model is not None:
        await model.aclose()
    _chat_model.cache_clear()


async def test_reconnect_and_open_while_streaming_gets_a_snapshot(
    small_kb: Any, personas: dict[str, Any], release: threading.Event
) -> None:
    first = await _connected(personas["ana"])
    await first.send_json_to(
        {"type": "message", "conversation": None, "text": "quantos dias de férias eu tenho?"}
    )
    frames = await _until(first, "delta")
    conversation = frames[0]["id"]
    sources = next(f for f in frames if f["type"] == "sources")
    await first.disconnect()

    second = await _connected(personas["ana"])
    await second.send_json_to({"type": "open", "conversation": conversation})
    snapshot = await second.receive_json_from(timeout=WAIT_S)
    assert snapshot == {
        "type": "snapshot",
        "message_id": sources["message_id"],
        "reply_to": sources["reply_to"],
        "text": FIRST_PIECE,
        "sources": sources["sources"],
    }
    release.set()
    rest = await _until(second, "done")
    assert [f["type"] for f in rest] == ["delta", "done"]
    assert rest[0]["offset"] == len(FIRST_PIECE)
    assert rest[-1]["text"] == FIRST_PIECE + " por ano."
    await second.disconnect()


async def test_dropped_socket_does_not_stop_the_turn(
    small_kb: Any, personas: dict[str, Any], release: threading.Event
) -> None:
    communicator = await _connected(personas["ana"])
    await communicator.send_json_to(
        {"type": "message", "conversation": None, "text": "quantos dias de férias eu tenho?"}
    )
    frames = await _until(communicator, "sources")
    await communicator.disconnect()  # the model has not finished: it is stalled
    (task,) = RUNNING
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, WAIT_S)
    _user, answer = await _messages(frames[0]["id"])
    assert answer.id == frames[-1]["message_id"]
    assert answer.status == Message.Status.COMPLETE
    assert answer.text == FIRST_PIECE + " por ano."
    assert answer.sources == frames[-1]["sources"]


async def test_a_new_conversation_is_announced_once_its_message_is_stored(
    personas: dict[str, Any],
) -> None:
    """The page moves to the conversation's address on this frame: a reload must find it."""
    communicator = await _connected(personas["ana"])
    await communicator.send_json_to({"type": "message", "conversation": None, "text": "férias?"})
    created = await communicator.receive_json_from(timeout=WAIT_S)
    assert created["type"] == "conversation"
    stored = await _messages(created["id"])
    assert [(m.role, m.text) for m in stored] == [("user", "férias?")]
    await _until(communicator, "done", "clarify", "error")
    await communicator.disconnect()
