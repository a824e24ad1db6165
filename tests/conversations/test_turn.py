"""One chat turn against real local model servers (Ollama NDJSON, OpenAI SSE) and the real KB.

The model servers are `pytest_httpserver` instances speaking each provider's wire format;
nothing in the pipeline is mocked. Turns are run through `turn_run`/`start_turn`, the same
entry points the consumer uses, with `emit` collecting the frames.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from django.db import connection
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conversations.live import LIVE
from conversations.models import Conversation, Message, TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.turn import RUNNING, request_stop, start_turn, turn_run
from retrieval.embeddings import _load
from retrieval.models import Collection
from retrieval.services import _chat_model, chat_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

WAIT_S = 20  # a hang guard, never a performance assertion
EMAIL, CPF = "ana.souza@example.com", "529.982.247-25"
QUESTION = "quantos dias de férias eu tenho por ano?"
REWRITE = {
    "queries": [{"text": "dias de férias por ano", "type": "normalize", "area": None}],
    "needs_clarification": False,
    "clarification": None,
}
FAILED_NOTE = "O modelo de linguagem não respondeu; mostrando uma resposta extrativa."
CUT_NOTE = "A resposta do modelo foi interrompida; o texto acima pode estar incompleto."


# --- model servers --------------------------------------------------------------------------------


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets a stalled server handler go on; always set at the end so no thread lingers."""
    event = threading.Event()
    yield event
    event.set()


async def _finish_turns() -> None:
    if RUNNING:
        await asyncio.wait_for(asyncio.gather(*RUNNING, return_exceptions=True), WAIT_S)


@pytest_asyncio.fixture(autouse=True)
async def _turns_finished() -> AsyncIterator[None]:
    yield
    await _finish_turns()


async def _use_model(settings: Any, server: HTTPServer, backend: str, **extra: Any) -> None:
    server.clear()
    settings.CHATRAG_LLM_BACKEND = f"retrieval.pipeline.llm.{backend}"
    settings.CHATRAG_LLM_URL = server.url_for("/")
    settings.CHATRAG_LLM_MODEL = "test-model"
    for name, value in extra.items():
        setattr(settings, name, value)
    _chat_model.cache_clear()


@pytest_asyncio.fixture
async def ollama(settings: Any, model_server: HTTPServer) -> AsyncIterator[HTTPServer]:
    await _use_model(settings, model_server, "OllamaChat")
    yield model_server
    await _finish_turns()
    model = chat_model()
    if model is not None:
        await model.aclose()
    _chat_model.cache_clear()
    model_server.check_assertions()  # no request arrived that the test did not script


@pytest_asyncio.fixture
async def openai(settings: Any, model_server: HTTPServer) -> AsyncIterator[HTTPServer]:
    await _use_model(settings, model_server, "OpenAIChat", CHATRAG_LLM_API_KEY="sk-test")
    yield model_server
    await _finish_turns()
    model = chat_model()
    if model is not None:
        await model.aclose()
    _chat_model.cache_clear()
    model_server.check_assertions()


Handler = Callable[[dict[str, Any]], Response]


def _route(server: HTTPServer, path: str, *, rewrite: Handler, answer: Handler) -> None:
    """One endpoint for both calls, told apart the way the server does: by `stream`."""

    def handle(request: Request) -> Response:
        body = json.loads(request.get_data())
        return answer(body) if body.get("stream") else rewrite(body)

    server.expect_request(path, method="POST").respond_with_handler(handle)


def _ollama_reply(content: str) -> Handler:
    return lambda body: Response(
        json.dumps({"model": body["model"], "message": {"content": content}, "done": True}),
        mimetype="application/json",
    )


def _ndjson_line(content: str, done: bool = False) -> bytes:
    return json.dumps({"message": {"role": "assistant", "content": content}, "done": done}).encode()


def _ollama_stream(
    pieces: Sequence[str], *, then: Callable[[], Iterator[bytes]] | None = None
) -> Handler:
    """Stream `pieces` as NDJSON; `then` replaces the closing `done` line."""

    def lines() -> Iterator[bytes]:
        for piece in pieces:
            yield _ndjson_line(piece) + b"\n"
        if then is None:
            yield _ndjson_line("", done=True) + b"\n"
        else:
            yield from then()

    return lambda body: Response(lines(), mimetype="application/x-ndjson")


def _status(code: int) -> Handler:
    return lambda body: Response(json.dumps({"error": "boom"}), status=code)


def _bodies(server: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(request.get_data()) for request, _ in server.log]


# --- running a turn -------------------------------------------------------------------------------


@database_sync_to_async
def _store(user: Any, text: str) -> Message:
    conversation = conversation_create(user=user)
    return message_store_user(conversation=conversation, text=text)


async def _turn(user: Any, text: str) -> tuple[list[dict[str, Any]], Message]:
    """Store a question and run its turn to the end; return the frames and the user message."""
    message = await _store(user, text)
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    await asyncio.wait_for(turn_run(message_id=message.id, emit=emit), WAIT_S)
    return frames, message


@database_sync_to_async
def _stored(message: Message) -> tuple[Message, Message, TurnTrace]:
    """The user message, its answer and its trace, as stored."""
    user = Message.objects.get(pk=message.pk)
    answer = Message.objects.get(reply_to=user)
    return user, answer, TurnTrace.objects.get(message=user)


def _types(frames: list[dict[str, Any]]) -> list[str]:
    kinds = [f["type"] for f in frames]
    # Collapse the deltas: the contract is their position, not their number.
    return [k for i, k in enumerate(kinds) if k != "delta" or kinds[i - 1] != "delta"]


def _citations(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\[(\d+)\]", text)}


# --- the model path -------------------------------------------------------------------------------


async def test_model_answer_keeps_real_citations_and_personal_data_never_leaves(
    small_kb: Any, personas: dict[str, Any], ollama: HTTPServer
) -> None:
    question = f"meu email é {EMAIL} e CPF {CPF}, quantos dias de férias tenho?"
    pieces = [
        "Você tem direito a 30 dias de férias [1]",
        " e a lua é de queijo [9]. Confirmação vai para [EMA",  # a placeholder split in two
        "IL_1] (CPF [CPF_1]).",
    ]
    _route(
        ollama,
        "/api/chat",
        rewrite=_ollama_reply(json.dumps(REWRITE)),
        answer=_ollama_stream(pieces),
    )
    frames, message = await _turn(personas["ana"], question)
    assert _types(frames) == ["rewrite", "sources", "delta", "done"]
    rewrite, sources, done = frames[0], frames[1], frames[-1]
    assert rewrite["backend"] == "llm"
    assert rewrite["model"] == "test-model"
    assert "dias de férias por ano" in [q["text"] for q in rewrite["queries"]]

    assert done["status"] == "complete"
    assert done["extractive"] is False
    assert "[1]" in done["text"]
    assert "[9]" not in done["text"]
    assert _citations(done["text"]) <= set(range(1, len(sources["sources"]) + 1))
    # The model's placeholders come back as the user's own values, in the frames and stored.
    assert f"Confirmação vai para {EMAIL} (CPF {CPF})." in done["text"]
    deltas = "".join(f["delta"] for f in frames if f["type"] == "delta")
    assert EMAIL in deltas and "[EMA" not in deltas
    user, answer, trace = await _stored(message)
    assert answer.text == done["text"]
    assert (answer.status, answer.extractive, answer.error) == ("complete", False, "")
    assert user.text == question  # the user's own message is kept as typed

    rewrite_body, answer_body = _bodies(ollama)
    assert (rewrite_body["stream"], answer_body["stream"]) == (False, True)
    assert "format" in rewrite_body
    # Nothing personal reached the model server, in any request.
    for request, _ in ollama.log:
        raw = request.get_data(as_text=True)
        for secret in (EMAIL, CPF, "52998224725", "ana.souza"):
            assert secret not in raw
            assert json.dumps(secret)[1:-1] not in raw
    # The answer prompt carries the numbered passages and the user's ORIGINAL question.
    prompt = answer_body["messages"][-1]["content"]
    assert prompt.startswith("<passages>\n[1] " + sources["sources"][0]["title"])
    asked = prompt.split("<question>\n", 1)[1].split("\n</question>", 1)[0]
    assert asked == trace.masked_question
    assert "quantos dias de férias tenho?" in asked
    assert "[EMAIL_1]" in asked and "[CPF_1]" in asked
    assert "por ano" not in asked  # not the rewritten query
    # The trace holds masked text only.
    stored_trace = json.dumps(
        [trace.masked_question, trace.masked_window, trace.rewrite, trace.search],
        ensure_ascii=False,
    )
    assert EMAIL not in stored_trace and CPF not in stored_trace


async def test_model_http_500_falls_back_to_rules_and_an_extractive_answer(
    small_kb: Any, personas: dict[str, Any], ollama: HTTPServer
) -> None:
    _route(ollama, "/api/chat", rewrite=_status(500), answer=_status(500))
    frames, message = await _turn(personas["ana"], QUESTION)
    assert _types(frames) == ["rewrite", "sources", "delta", "done"]
    assert frames[0]["backend"] == "rules"
    assert "llm http 500" in frames[0]["errors"]
    done = frames[-1]
    assert (done["status"], done["extractive"]) == ("complete", True)
    # The extractive answer opens by replying to the question; "no model" is the badge's.
    assert done["text"].startswith(FAILED_NOTE + "\n\nSobre ")
    assert "Resposta extrativa" not in done["text"]
    assert _citations(done["text"])
    user, answer, trace = await _stored(message)
    assert answer.text == done["text"]
    assert answer.extractive is True
    assert "http 500" in answer.error
    assert trace.rewrite["backend"] == "rules"
    assert trace.rewrite["error"] == "llm http 500"
    assert "fell back to rules" in trace.rewrite["notes"]
    assert "llm http 500" in trace.errors
    assert any(e.startswith("model failed:") and "500" in e for e in trace.errors)
    assert len(ollama.log) == 2  # one rewrite, one answer request: no retry storm


async def test_model_stalling_past_the_timeout_falls_back_gracefully(
    small_kb: Any,
    personas: dict[str, Any],
    ollama: HTTPServer,
    settings: Any,
    release: threading.Event,
) -> None:
    settings.CHATRAG_LLM_TIMEOUT = 0.5
    settings.CHATRAG_REWRITE_TIMEOUT = 0.5

    def stall(body: dict[str, Any]) -> Response:
        release.wait(WAIT_S)
        return Response(json.dumps({"message": {"content": "{}"}, "done": True}))

    _route(ollama, "/api/chat", rewrite=stall, answer=stall)
    frames, message = await _turn(personas["ana"], QUESTION)
    release.set()
    done = frames[-1]
    assert (done["type"], done["status"], done["extractive"]) == ("done", "complete", True)
    assert done["text"].startswith(FAILED_NOTE)
    _user, answer, trace = await _stored(message)
    assert trace.rewrite["backend"] == "rules"
    assert trace.rewrite["error"] == "llm timeout after 0.5s"
    assert any("timed out" in e for e in trace.errors), trace.errors
    assert "timed out" in answer.error


async def test_garbage_rewrite_output_falls_back_to_rules(
    small_kb: Any, personas: dict[str, Any], ollama: HTTPServer
) -> None:
    _route(
        ollama,
        "/api/chat",
        rewrite=_ollama_reply("Claro! Aqui estão as consultas: férias, dias"),
        answer=_ollama_stream(["Você tem 30 dias de férias por ano [1]."]),
    )
    frames, message = await _turn(personas["ana"], QUESTION)
    assert frames[0]["backend"] == "rules"
    done = frames[-1]
    assert (done["status"], done["extractive"]) == ("complete", False)
    assert done["text"] == "Você tem 30 dias de férias por ano [1]."
    _user, _answer, trace = await _stored(message)
    assert trace.rewrite["error"].startswith("llm output invalid")
    assert trace.rewrite["error"] in trace.errors


def _invalid_line() -> Iterator[bytes]:
    yield b"{this is not json\n"


def _connection_dropped() -> Iterator[bytes]:
    raise ConnectionAbortedError("the model server went away")  # werkzeug drops the socket
    yield b""  # pragma: no cover - makes this a generator


@pytest.mark.parametrize("breakage", [_invalid_line, _connection_dropped])
async def test_stream_breaking_mid_answer_keeps_the_partial_answer_with_a_note(
    small_kb: Any,
    personas: dict[str, Any],
    ollama: HTTPServer,
    breakage: Callable[[], Iterator[bytes]],
) -> None:
    _route(
        ollama,
        "/api/chat",
        rewrite=_ollama_reply(json.dumps(REWRITE)),
        answer=_ollama_stream(["Você tem direito a 30 dias", " de férias [1]"], then=breakage),
    )
    frames, message = await _turn(personas["ana"], QUESTION)
    done = frames[-1]
    assert (done["type"], done["status"], done["extractive"]) == ("done", "complete", False)
    assert done["text"] == f"Você tem direito a 30 dias de férias [1]\n\n({CUT_NOTE})"
    _user, answer, trace = await _stored(message)
    assert answer.text == done["text"]
    assert answer.status == Message.Status.COMPLETE
    assert answer.error.startswith("model failed:")
    assert answer.error in trace.errors


async def test_openai_compatible_server_streams_an_answer_end_to_end(
    small_kb: Any, personas: dict[str, Any], openai: HTTPServer
) -> None:
    def rewrite(body: dict[str, Any]) -> Response:
        reply = {"choices": [{"index": 0, "message": {"content": json.dumps(REWRITE)}}]}
        return Response(json.dumps(reply), mimetype="application/json")

    def answer(body: dict[str, Any]) -> Response:
        def events() -> Iterator[bytes]:
            yield b": keep-alive comment\n\n"
            for piece in ("São 30 dias ", "corridos [1]", "."):
                chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            yield f"data: {json.dumps(final)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return Response(events(), mimetype="text/event-stream")

    _route(openai, "/v1/chat/completions", rewrite=rewrite, answer=answer)
    frames, message = await _turn(personas["ana"], QUESTION)
    assert _types(frames) == ["rewrite", "sources", "delta", "done"]
    assert frames[0]["backend"] == "llm"
    done = frames[-1]
    assert (done["status"], done["extractive"], done["text"]) == (
        "complete",
        False,
        "São 30 dias corridos [1].",
    )
    _user, answer_message, trace = await _stored(message)
    assert answer_message.text == done["text"]
    assert trace.rewrite["backend"] == "llm"
    assert trace.errors == []
    rewrite_body, answer_body = _bodies(openai)
    assert rewrite_body["response_format"]["type"] == "json_schema"
    assert answer_body["stream"] is True
    assert all(r.headers["Authorization"] == "Bearer sk-test" for r, _ in openai.log)


# --- stopping -------------------------------------------------------------------------------------


async def _start_and_wait_for_first_delta(
    user: Any,
) -> tuple[Message, asyncio.Task[None], list[dict[str, Any]]]:
    """Start a turn as the consumer does (its tests settle the channel layer it joins)."""
    message = await _store(user, QUESTION)
    frames: list[dict[str, Any]] = []
    first_delta = asyncio.Event()

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)
        if event["type"] == "delta":
            first_delta.set()

    start_turn(message_id=message.id, emit=emit, received_at=time.perf_counter())
    (task,) = RUNNING
    await asyncio.wait_for(first_delta.wait(), WAIT_S)
    return message, task, frames


def _slow_stream(release: threading.Event) -> Handler:
    def lines() -> Iterator[bytes]:
        yield _ndjson_line("Você tem direito a 30 dias [1]") + b"\n"
        release.wait(WAIT_S)
        yield _ndjson_line(" de férias por ano.") + b"\n"
        yield _ndjson_line("", done=True) + b"\n"

    return lambda body: Response(lines(), mimetype="application/x-ndjson")


async def test_stop_mid_answer_stores_the_partial_text_as_stopped(
    small_kb: Any,
    personas: dict[str, Any],
    ollama: HTTPServer,
    release: threading.Event,
    ws_settled: None,
) -> None:
    _route(
        ollama,
        "/api/chat",
        rewrite=_ollama_reply(json.dumps(REWRITE)),
        answer=_slow_stream(release),
    )
    message, task, frames = await _start_and_wait_for_first_delta(personas["ana"])
    assert request_stop(message.id) is True
    release.set()
    await asyncio.wait_for(task, WAIT_S)
    done = frames[-1]
    assert (done["type"], done["status"]) == ("done", "stopped")
    assert done["text"] == "Você tem direito a 30 dias [1]"
    _user, answer, _trace = await _stored(message)
    assert (answer.status, answer.text) == ("stopped", "Você tem direito a 30 dias [1]")
    assert message.id not in LIVE
    assert request_stop(message.id) is False  # nothing left to stop


async def test_stop_while_the_model_stalls_ends_the_turn_without_waiting_for_it(
    small_kb: Any,
    personas: dict[str, Any],
    ollama: HTTPServer,
    settings: Any,
    release: threading.Event,
    ws_settled: None,
) -> None:
    settings.CHATRAG_LLM_TIMEOUT = 60.0  # far beyond the hang guard: only the stop can end it
    _route(
        ollama,
        "/api/chat",
        rewrite=_ollama_reply(json.dumps(REWRITE)),
        answer=_slow_stream(release),
    )
    message, task, frames = await _start_and_wait_for_first_delta(personas["ana"])
    request_stop(message.id)
    await asyncio.wait_for(task, WAIT_S)  # the server is still stalled here
    assert not release.is_set()
    assert (frames[-1]["type"], frames[-1]["status"]) == ("done", "stopped")
    _user, answer, _trace = await _stored(message)
    assert (answer.status, answer.text) == ("stopped", "Você tem direito a 30 dias [1]")


# --- failures that are not the model's ------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens here once the socket is closed


@pytest.fixture
def embedder_reset() -> Iterator[None]:
    _load.cache_clear()
    yield
    _load.cache_clear()


async def test_embedding_server_down_answers_from_the_full_text_leg(
    small_kb: Any, personas: dict[str, Any], settings: Any, embedder_reset: None
) -> None:
    settings.CHATRAG_EMBEDDER = "retrieval.embeddings.OpenAIEmbedder"
    settings.CHATRAG_EMBEDDING_URL = f"http://127.0.0.1:{_closed_port()}"
    settings.CHATRAG_EMBEDDING_MODEL = "e5-remote"
    settings.CHATRAG_EMBEDDING_TIMEOUT = 2.0
    # The collection was embedded by that server, which is now down.
    await database_sync_to_async(Collection.objects.filter(pk=small_kb.pk).update)(
        embedding_model="OpenAIEmbedder/e5-remote"
    )
    frames, message = await _turn(personas["ana"], QUESTION)
    assert _types(frames) == ["rewrite", "sources", "delta", "done"]
    assert frames[1]["sources"], "the full-text leg alone finds the holiday rules"
    titles = [card["title"] for card in frames[1]["sources"]]
    assert "Férias – regras gerais para empregados" in titles
    assert frames[-1]["status"] == "complete"
    _user, answer, trace = await _stored(message)
    assert answer.status == Message.Status.COMPLETE
    assert any(e.startswith("embedding failed:") for e in trace.errors), trace.errors


async def test_collection_of_another_embedding_model_searches_full_text_only(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    await database_sync_to_async(Collection.objects.filter(pk=small_kb.pk).update)(
        embedding_model="some-other/model"
    )
    frames, message = await _turn(personas["ana"], QUESTION)
    assert frames[1]["type"] == "sources" and frames[1]["sources"]
    assert frames[-1]["status"] == "complete"
    _user, _answer, trace = await _stored(message)
    assert any(e.startswith("vector search off") for e in trace.errors), trace.errors


async def test_turn_that_cannot_load_its_message_emits_an_error_frame() -> None:
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    await asyncio.wait_for(turn_run(message_id=987654321, emit=emit), WAIT_S)
    (error,) = frames
    assert error["type"] == "error"
    assert error["reply_to"] == 987654321
    assert error["detail"] == "DoesNotExist"
    assert "tente de novo" in error["message"]
    assert 987654321 not in LIVE


async def test_turn_that_cannot_load_its_message_answers_in_the_default_language(
    settings: Any,
) -> None:
    """No message, no collection to ask: the failure is said in CHATRAG_DEFAULT_LANGUAGE."""
    settings.CHATRAG_DEFAULT_LANGUAGE = "en"
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    await asyncio.wait_for(turn_run(message_id=987654321, emit=emit), WAIT_S)
    (error,) = frames
    assert "please try again" in error["message"]


async def test_a_failing_emit_does_not_lose_the_answer(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    """The channel layer failing mid-turn is like a dropped socket: the answer is still stored."""
    message = await _store(personas["ana"], QUESTION)
    sent: list[str] = []

    async def emit(event: dict[str, Any]) -> None:
        if event["type"] in {"delta", "done"}:
            raise ConnectionError("channel layer unavailable")
        sent.append(event["type"])

    await asyncio.wait_for(turn_run(message_id=message.id, emit=emit), WAIT_S)
    assert sent == ["rewrite", "sources"]
    user, answer, _trace = await _stored(message)
    assert user.status == Message.Status.COMPLETE
    assert answer.status == Message.Status.COMPLETE
    assert answer.extractive and answer.text.startswith("Sobre ")
    assert _citations(answer.text)


@database_sync_to_async
def _sql(statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement)


async def test_database_error_while_storing_the_answer_marks_the_turn_failed(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    # A real database error at the last write: answers may not be stored as complete.
    await _sql(
        "ALTER TABLE conversations_message ADD CONSTRAINT test_refuse_complete_answers "
        "CHECK (role <> 'assistant' OR status <> 'complete') NOT VALID"
    )
    try:
        frames, message = await _turn(personas["ana"], QUESTION)
    finally:
        await _sql(
            "ALTER TABLE conversations_message DROP CONSTRAINT IF EXISTS "
            "test_refuse_complete_answers"
        )
    assert _types(frames) == ["rewrite", "sources", "delta", "error"]
    error = frames[-1]
    assert (error["reply_to"], error["detail"]) == (message.id, "IntegrityError")
    assert "tente de novo" in error["message"]
    user, answer, trace = await _stored(message)
    assert user.status == Message.Status.ERROR
    assert answer.status == Message.Status.ERROR  # not left "streaming" for good
    assert answer.text.startswith("Sobre ")  # what the user already saw
    assert answer.error.startswith("turn failed: IntegrityError")
    assert any(e.startswith("turn failed: IntegrityError") for e in trace.errors)


async def test_conversation_deleted_while_streaming_ends_the_turn_quietly(
    small_kb: Any,
    personas: dict[str, Any],
    ollama: HTTPServer,
    release: threading.Event,
    ws_settled: None,
) -> None:
    _route(
        ollama,
        "/api/chat",
        rewrite=_ollama_reply(json.dumps(REWRITE)),
        answer=_slow_stream(release),
    )
    message, task, frames = await _start_and_wait_for_first_delta(personas["ana"])
    await database_sync_to_async(Conversation.objects.filter(messages=message).delete)()
    release.set()
    await asyncio.wait_for(task, WAIT_S)  # raises if the turn itself failed
    assert frames[-1]["type"] == "error"
    assert not await database_sync_to_async(Message.objects.exists)()
    assert not await database_sync_to_async(TurnTrace.objects.exists)()


# --- turns that must not search -------------------------------------------------------------


async def test_thanks_after_an_answer_is_answered_politely_without_searching(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    frames, first = await _turn(personas["ana"], QUESTION)
    assert "sources" in _types(frames)
    conversation_id = first.conversation_id

    @database_sync_to_async
    def store_thanks() -> Message:
        return message_store_user(conversation=first.conversation, text="valeu, obrigado! 👍")

    thanks = await store_thanks()
    replies: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        replies.append(event)

    await asyncio.wait_for(turn_run(message_id=thanks.id, emit=emit), WAIT_S)
    # No sources frame: the previous topic is not reopened, and nothing was searched.
    assert _types(replies) == ["rewrite", "done"]
    assert replies[0]["queries"] == []
    done = replies[-1]
    assert done["text"].startswith("De nada!")
    assert (done["status"], done["extractive"], done["small_talk"]) == ("complete", False, "thanks")
    user, answer, trace = await _stored(thanks)
    assert answer.sources == [] and answer.conversation_id == conversation_id
    assert trace.rewrite["no_search"] is True and trace.rewrite["small_talk"] == "thanks"


# --- a stop during the searches, and the turn's budget (issue 38, finding 2) ----------------------


@pytest.fixture
def stalled_search(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> threading.Event:
    """The search engine stalls until `release` (a search held by another user's load);
    returns the event set once a search started."""
    from retrieval.pipeline.search import SearchEngine

    started = threading.Event()
    search = SearchEngine.search_while_embedding

    def stalled(self: SearchEngine, *args: Any, **kwargs: Any) -> Any:
        started.set()
        release.wait(WAIT_S)
        return search(self, *args, **kwargs)

    monkeypatch.setattr(SearchEngine, "search_while_embedding", stalled)
    return started


async def test_a_stop_during_the_searches_ends_the_turn_without_waiting_for_them(
    small_kb: Any,
    personas: dict[str, Any],
    stalled_search: threading.Event,
    release: threading.Event,
    ws_settled: None,
) -> None:
    """The attack: a stop sent while a slow message was searched was honoured only when
    retrieval ended (35 s later). It now cancels the searches it interrupts."""
    message = await _store(personas["ana"], QUESTION)
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    start_turn(message_id=message.id, emit=emit, received_at=time.perf_counter())
    (task,) = RUNNING
    await asyncio.to_thread(stalled_search.wait, WAIT_S)
    assert request_stop(message.id) is True
    await asyncio.wait_for(task, WAIT_S)
    assert not release.is_set()  # the search is still stalled: the turn did not wait for it
    assert (frames[-1]["type"], frames[-1]["status"]) == ("done", "stopped")
    answer = await database_sync_to_async(Message.objects.get)(reply_to=message)
    assert (answer.status, answer.text) == ("stopped", "")
    assert message.id not in LIVE


SLOW_SEARCH = "e38-slow-search"  # marks the injected statement in pg_stat_activity


def _slow_searches_running() -> int:
    """How many backends run the injected slow search statement (pg_stat_activity)."""
    import psycopg

    from retrieval.services import database_conninfo

    with psycopg.connect(database_conninfo(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE %s",
            [f"%{SLOW_SEARCH}%"],
        ).fetchone()
    return int(row[0]) if row else 0


def _until(condition: Callable[[], bool]) -> bool:
    """Whether a state of the database came (a hang guard, never a timing)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def test_a_stop_during_a_slow_search_cancels_its_sql_in_postgres(
    small_kb: Any, personas: dict[str, Any], monkeypatch: pytest.MonkeyPatch, ws_settled: None
) -> None:
    """The search SQL a stopped turn started kept running in PostgreSQL on a search thread,
    holding a pooled connection and a CPU of the database. Each search statement here first
    sleeps in the server on its real pooled connection; the stop cancels it there (the error
    the thread sees is QueryCanceled, and no backend runs it any more) and the next turn's
    searches run on the pool as usual."""
    from psycopg.errors import QueryCanceled

    from retrieval.pipeline import search as search_module

    ended: list[BaseException | None] = []

    def slowed(real: Callable[..., Any]) -> Callable[..., Any]:
        def slow(conn: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                conn.execute(f"SELECT pg_sleep(%s) /* {SLOW_SEARCH} */", [WAIT_S * 3])
            except BaseException as exc:
                ended.append(exc)
                raise
            ended.append(None)
            return real(conn, *args, **kwargs)

        return slow

    monkeypatch.setattr(search_module, "text_leg_ranks", slowed(search_module.text_leg_ranks))
    monkeypatch.setattr(search_module, "hybrid_search", slowed(search_module.hybrid_search))
    message = await _store(personas["ana"], QUESTION)
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    start_turn(message_id=message.id, emit=emit, received_at=time.perf_counter())
    (task,) = RUNNING
    assert await asyncio.to_thread(_until, lambda: _slow_searches_running() > 0)
    assert request_stop(message.id) is True
    await asyncio.wait_for(task, WAIT_S)
    assert (frames[-1]["type"], frames[-1]["status"]) == ("done", "stopped")
    # Cancelled in PostgreSQL, not left to run out its sleep.
    assert await asyncio.to_thread(_until, lambda: _slow_searches_running() == 0)
    assert await asyncio.to_thread(_until, lambda: len(ended) > 0)
    assert all(isinstance(exc, QueryCanceled) for exc in ended), ended
    monkeypatch.undo()
    again, _ = await _turn(personas["ana"], QUESTION)
    assert "sources" in _types(again)


async def test_a_turn_past_its_budget_fails_with_its_error_frame(
    small_kb: Any,
    personas: dict[str, Any],
    settings: Any,
    stalled_search: threading.Event,
    release: threading.Event,
) -> None:
    settings.CHATRAG_TURN_BUDGET_S = 0.5
    frames, message = await _turn(personas["ana"], QUESTION)
    assert not release.is_set()
    assert frames[-1]["type"] == "error" and frames[-1]["detail"] == "TimeoutError"
    stored = await database_sync_to_async(Message.objects.get)(pk=message.pk)
    assert stored.status == Message.Status.ERROR
