"""Hostile content end to end: injected questions, documents and model output; hostile frames.

Outcomes asserted, not just "no crash":
- no scope escape: a hostile question (or a model obeying one) run through the real turn never
  brings a passage of the restricted document to a user outside its group, and the model never
  receives its text;
- no markup injection: answers, passages, titles, conversation titles and traces render as text
  (no script, no event handler, no foreign link) on the chat and document pages, and chat.js
  inserts model and passage text with textContent only;
- clear errors for hostile frames, and the socket stays usable.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conversations.live import LIVE
from conversations.models import Conversation, Message, TurnTrace
from conversations.services import clean_user_text, conversation_create, message_store_user
from conversations.turn import turn_run
from retrieval.embeddings import get_embedder
from retrieval.ingestion.services import (
    documents_ingest,
    source_from_file,
    sources_from_paths,
)
from retrieval.models import Chunk, Document
from retrieval.services import _chat_model, chat_model, default_collection
from tests.hostile import (
    HOSTILE_ANSWER,
    HOSTILE_DOCUMENT,
    HOSTILE_DOCUMENT_QUESTION,
    HOSTILE_FRAMES,
    HOSTILE_REWRITES,
    IMG,
    INJECTION_QUESTIONS,
    RESTRICTED_DOC,
    SCRIPT,
)
from tests.support import (
    WS_WAIT_S,
    close_postgres_layer,
    finish_turns,
    ws_connected,
    ws_pong,
    ws_until,
)

ROOT = Path(__file__).resolve().parents[2]
ASYNC_DB = [pytest.mark.django_db(transaction=True, databases="__all__"), pytest.mark.asyncio]


# --- what a page may contain ----------------------------------------------------------------------


class _Markup(HTMLParser):
    """Collect every tag and attribute of a page, and the text of its inline scripts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.script_bodies: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_bodies.append(data)


FORBIDDEN_TAGS = {"img", "iframe", "frame", "object", "embed", "b", "base"}
SAFE_LINK = re.compile(r"^(#[\w-]*|/(?![/\\])[^\s]*)$")


def assert_no_live_markup(html: str) -> None:
    """The page runs no script and loads nothing but its own static files and pages."""
    assert SCRIPT not in html and "<img src=x" not in html
    page = _Markup()
    page.feed(html)
    for tag, attrs in page.tags:
        assert tag not in FORBIDDEN_TAGS, tag
        assert not (tag == "meta" and "http-equiv" in attrs), attrs
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "src", "action", "formaction", "data-url"):
                assert SAFE_LINK.match(value), (tag, name, value)
        if tag == "script":
            assert attrs.get("type") == "application/json" or attrs.get("src", "").startswith(
                "/static/"
            ), attrs
    for body in page.script_bodies:
        json.loads(body)  # data blocks only, and still valid JSON with the hostile text in it


def _hostile_cards() -> list[dict[str, Any]]:
    card = {
        "document_id": 1,
        "chunk_id": 11,
        "title": f"Política {SCRIPT}",
        "section": IMG,
        "snippet": f"**{SCRIPT}** </script><script>alert(2)</script>",
    }
    return [
        {**card, "n": 1, "url": "javascript:alert(document.cookie)"},
        {**card, "n": 2, "url": "//evil.example/steal"},
        {**card, "n": 3, "url": "/\\evil.example"},
        {**card, "n": 4, "url": "/documents/1/?chunk=11#chunk-11"},
    ]


def _store_hostile_conversation(owner: User) -> Conversation:
    conversation = conversation_create(user=owner, title=f"{SCRIPT} </title><script>x</script>")
    question = message_store_user(conversation=conversation, text=f"{SCRIPT} {IMG}")
    TurnTrace.objects.create(
        message=question,
        rewrite={
            "backend": f"<b>{SCRIPT}</b>",
            "model": IMG,
            "queries": [{"text": f"{SCRIPT} vale-refeição", "type": IMG, "weight": 1.0}],
            "glossary_hits": [{"term": SCRIPT, "expansion": IMG}],
            "corrections": {SCRIPT: IMG},
            "notes": [SCRIPT],
            "anomalies": [IMG],
            "needs_clarification": True,
            "clarification": {"question": SCRIPT, "options": [SCRIPT, f'"{IMG}']},
        },
        errors=[SCRIPT],
    )
    Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=HOSTILE_ANSWER,
        status=Message.Status.CLARIFY,
        reply_to=question,
        sources=_hostile_cards(),
    )
    return conversation


# --- pages ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_hostile_stored_content_renders_as_text(personas: dict[str, User]) -> None:
    conversation = _store_hostile_conversation(personas["ana"])
    client = Client()
    client.force_login(personas["ana"])
    for url in (reverse("chat"), reverse("conversation", args=[conversation.id])):
        html = client.get(url).content.decode()
        assert_no_live_markup(html)
        assert "&lt;script&gt;alert(&#x27;xss&#x27;)&lt;/script&gt;" in html  # kept, as text
    page = client.get(reverse("conversation", args=[conversation.id])).content.decode()
    # Links from stored source cards: only the one to our own document page survives.
    assert page.count('href="/documents/1/?chunk=11#chunk-11"') == 1
    assert page.count('class="source-link" data-slot="link" href="#"') == 3
    # A citation of a passage that does not exist is not a link; a markdown link stays text.
    answer = conversation.messages.get(role="assistant")
    assert f'href="#src-{answer.id}-1"' in page and f"#src-{answer.id}-99" not in page
    assert "[click](javascript:alert(1))" in page


@pytest.mark.django_db
def test_hostile_search_query_is_echoed_as_text(personas: dict[str, User]) -> None:
    client = Client()
    client.force_login(personas["ana"])
    html = client.post(reverse("chat"), {"q": f'"><svg onload=alert(1)>{SCRIPT}'}).content.decode()
    assert_no_live_markup(html)
    assert "<svg onload" not in html


@pytest.mark.django_db
def test_nul_control_and_huge_form_input_never_breaks_a_page(personas: dict[str, User]) -> None:
    """What reaches PostgreSQL from a form or a query string is validated first (no 500)."""
    conversation = conversation_create(user=personas["ana"], title="Antes")
    question = message_store_user(conversation=conversation, text="Pergunta")
    answer = Message.objects.create(
        conversation=conversation, role="assistant", text="Resposta", reply_to=question
    )
    client = Client()  # raises on any server error
    client.force_login(personas["ana"])
    huge = "x" * 100_000
    rename = reverse("conversation_rename", args=[conversation.id])
    requests: list[tuple[str, str, dict[str, str]]] = [
        ("post", reverse("chat"), {"q": "\x00"}),
        ("post", reverse("chat"), {"q": "a\x00b\x1b" + huge}),
        ("post", reverse("conversation", args=[conversation.id]), {"q": "%\x00_"}),
        ("post", rename, {"title": "\x00"}),
        ("post", rename, {"title": huge}),
        ("post", rename, {"title": "\x00", "next": "javascript:alert(1)"}),
        ("post", reverse("feedback", args=[answer.id]), {"value": "1", "reason": "\x00"}),
        ("post", reverse("feedback", args=[answer.id]), {"value": "1", "reason": huge}),
        ("post", reverse("feedback", args=[answer.id]), {"value": "\x00"}),
        ("get", "/documents/1/", {"chunk": "\x00"}),
        ("post", "/i18n/setlang/", {"language": "\x00", "next": "//evil.example"}),
    ]
    for method, url, data in requests:
        response = getattr(client, method)(url, data)
        assert response.status_code < 500, (url, data.keys())
        if response.status_code == 302:
            assert not response["Location"].startswith(("javascript:", "//")), response["Location"]
    conversation.refresh_from_db()
    assert conversation.title == "Antes"
    anon = Client()
    for username, password in (("\x00", "x"), ("ana", "\x00"), ("a" * 10_000, huge)):
        for login_url in (reverse("login"), "/admin/login/"):
            response = anon.post(login_url, {"username": username, "password": password})
            assert response.status_code == 200, login_url  # the form again, with its error
    next_url = anon.post(
        reverse("login"),
        {"username": "ana", "password": "pw-ana-123", "next": "\x00//evil.example"},
    )
    assert next_url.status_code == 302 and next_url["Location"] == reverse("chat")


@pytest.fixture
def hostile_document(tmp_path: Path, personas: dict[str, User]) -> Document:
    """HOSTILE_DOCUMENT ingested as a public document, as `manage.py ingest` would."""
    path = tmp_path / "pt" / "politica-de-crachas.md"
    path.parent.mkdir()
    path.write_text(HOSTILE_DOCUMENT, encoding="utf-8")
    report = documents_ingest(
        collection=default_collection(),
        sources=[source_from_file(path, root=tmp_path)],
        embedder=get_embedder(),
        total=1,
    )
    assert not report.errors, report.errors
    return Document.objects.get(external_id="pt/politica-de-crachas")


@pytest.mark.django_db
def test_hostile_document_page_renders_as_text(
    personas: dict[str, User], hostile_document: Document
) -> None:
    client = Client()
    client.force_login(personas["carlos"])
    chunk = hostile_document.chunks.order_by("position").first()
    assert chunk is not None
    response = client.get(reverse("document", args=[hostile_document.id]), {"chunk": chunk.id})
    html = response.content.decode()
    assert response.status_code == 200
    assert_no_live_markup(html)
    assert "<iframe" not in html
    assert "&lt;script&gt;" in html and "IGNORE ALL PREVIOUS INSTRUCTIONS" in html


@pytest.mark.django_db
def test_binary_and_invalid_utf8_files_are_refused_or_stored_cleanly(
    tmp_path: Path, personas: dict[str, User]
) -> None:
    """NUL bytes are refused by name; bytes that are not UTF-8 never reach PostgreSQL raw."""
    binary = tmp_path / "binario.md"
    binary.write_bytes(b"---\ntitle: Bin\n---\n\nTexto com NUL \x00 no meio sobre f\xc3\xa9rias.")
    latin = tmp_path / "latin.md"
    latin.write_bytes(
        b"---\ntitle: Pol\xedtica\n---\n\n# Se\xe7\xe3o\n\n"
        b"Bytes inv\xe1lidos \xff\xfe e controle \x1b[31m no texto sobre f\xe9rias e folgas."
    )
    items, total = sources_from_paths([binary, latin])
    report = documents_ingest(
        collection=default_collection(), sources=items, embedder=get_embedder(), total=total
    )
    errors = {Path(o.external_id).name: o.error for o in report.errors}
    assert list(errors) == ["binario.md"] and "binary" in (errors["binario.md"] or "")
    assert not Document.objects.filter(external_id__contains="binario").exists()
    stored = list(Chunk.objects.filter(document__external_id__contains="latin"))
    assert stored
    for chunk in stored:
        assert "\x00" not in chunk.text
        chunk.text.encode("utf-8")
        assert "Bytes inv" in chunk.text


def test_chat_js_inserts_text_never_html() -> None:
    for name in ("chat.js", "document.js"):
        source = (ROOT / "static" / name).read_text(encoding="utf-8")
        code = re.sub(r"/\*.*?\*/|//[^\n]*", "", source, flags=re.DOTALL)  # comments out
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "srcdoc",
            "createContextualFragment",
        ):
            assert sink not in code, (name, sink)
        # Every link set from data goes through safeUrl, our own url() or a fragment.
        for assigned in re.findall(r"\.href\s*=\s*([^;]+);", code):
            assert assigned.startswith(("safeUrl(", "url(", '"#')), (name, assigned)
        assert not re.search(r"setAttribute\(\s*[\"'](on|href|src)", code), name
    chat = (ROOT / "static" / "chat.js").read_text(encoding="utf-8")
    # The one HTML parse: our own conversation page (escaped by the server, checked above),
    # fetched same-origin to reconcile missed turns; DOMParser documents run no script.
    assert chat.count("parseFromString(") == 1
    assert 'url("conversation", state.conversation)' in chat
    assert 'credentials: "same-origin"' in chat
    # Model and passage text (answers, titles, snippets, sections, queries) goes in as text.
    assert 'slot(card, "title").textContent' in chat and 'slot(card, "snippet").textContent' in chat


# --- hostile frames through the real socket -------------------------------------------------------


@pytest_asyncio.fixture
async def settled_socket() -> AsyncIterator[None]:
    await cache.aclear()
    yield
    await finish_turns()
    await close_postgres_layer()
    await cache.aclear()
    LIVE.clear()


@pytest.mark.parametrize(
    ("payload", "code"),
    [pytest.param(payload, code, id=name) for name, payload, code in HOSTILE_FRAMES],
)
@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.asyncio
async def test_hostile_frame_gets_a_clear_error_and_the_socket_stays_usable(
    personas: dict[str, Any], settled_socket: None, payload: str | bytes, code: str
) -> None:
    communicator = await ws_connected(personas["ana"])
    key = "bytes" if isinstance(payload, bytes) else "text"
    # send_input: the test helper refuses an empty frame, a real client can send one.
    await communicator.send_input({"type": "websocket.receive", key: payload})
    error = await communicator.receive_json_from(timeout=WS_WAIT_S)
    assert (error["type"], error["code"]) == ("error", code)
    assert isinstance(error["message"], str) and 0 < len(error["message"]) <= 200
    await ws_pong(communicator)
    assert await database_sync_to_async(Message.objects.count)() == 0
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.asyncio
async def test_hostile_client_id_and_text_come_back_clean(
    personas: dict[str, Any], settled_socket: None
) -> None:
    communicator = await ws_connected(personas["ana"])
    await communicator.send_to(
        text_data='{"type": "message", "conversation": null, '
        '"text": "f\\u00e9rias\\u0000\\ud800 <b>ok</b>", "client_id": "c\\ud800\\u0007-1"}'
    )
    frames = await ws_until(communicator, "accepted", "error")
    accepted = frames[-1]
    assert accepted["type"] == "accepted"
    assert accepted["client_id"] == "c-1"  # a lone surrogate would not even encode
    assert accepted["text"] == "férias <b>ok</b>"  # stored as typed; the page escapes it
    await ws_until(communicator, "done", "clarify", "error")
    await communicator.disconnect()


# --- no scope escape: hostile questions through the real turn -------------------------------------


def _collector() -> tuple[list[dict[str, Any]], Any]:
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    return frames, emit


@database_sync_to_async
def _new_turn(user: User, text: str) -> int:
    """Store a question as the socket does: validated and cleaned first."""
    conversation = conversation_create(user=user)
    cleaned = clean_user_text(text, max_chars=4000)
    return message_store_user(conversation=conversation, text=cleaned).id


@database_sync_to_async
def _restricted() -> tuple[int, set[int], list[str]]:
    """The restricted document's id, its chunks' ids, and its sentences."""
    document = Document.objects.get(external_id=RESTRICTED_DOC)
    chunks = list(document.chunks.all())
    sentences = [
        s.strip()
        for c in chunks
        for s in re.split(r"(?<=[.!?:])\s+|\n+", c.text)
        if len(s.strip()) > 40
    ]
    return document.id, {c.id for c in chunks}, sentences


@database_sync_to_async
def _searched_chunks(message_id: int) -> list[int]:
    trace = TurnTrace.objects.get(message_id=message_id)
    return list((trace.search or {}).get("passages") or [])


async def _run_turn(user: User, text: str) -> tuple[int, list[dict[str, Any]]]:
    message_id = await _new_turn(user, text)
    frames, emit = _collector()
    await turn_run(message_id=message_id, emit=emit)
    LIVE.pop(message_id, None)
    return message_id, frames


def _escapes(frames: list[dict[str, Any]], searched: list[int], restricted: Any) -> list[str]:
    """What of the restricted document reached this turn (empty when the scope held)."""
    restricted_id, chunk_ids, sentences = restricted
    found = []
    for frame in frames:
        for card in frame.get("sources") or []:
            if card.get("document_id") == restricted_id:
                found.append(f"source card {card.get('title')!r}")
    if set(searched) & chunk_ids:
        found.append("restricted chunk among the passages")
    # What the user is shown as the answer (the rewrite frame only echoes their own words).
    shown = json.dumps(
        [f for f in frames if f["type"] in {"sources", "delta", "done", "clarify"}],
        ensure_ascii=False,
    )
    found += [f"sentence {s[:40]!r}" for s in sentences if s in shown]
    return found


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_hostile_questions_never_escape_the_users_scope(
    small_kb: Any, personas: dict[str, Any], settled_socket: None
) -> None:
    restricted = await _restricted()
    # The control: the same kind of question does reach the document for its group.
    message_id, frames = await _run_turn(personas["rita"], "faixas salariais 2026 banda P3")
    assert _escapes(frames, await _searched_chunks(message_id), restricted)

    held, escaped = 0, []
    for name, question in INJECTION_QUESTIONS:
        for persona in ("ana", "carlos"):
            message_id, frames = await _run_turn(personas[persona], question)
            assert frames and frames[-1]["type"] in {"done", "clarify"}, (name, frames[-1:])
            found = _escapes(frames, await _searched_chunks(message_id), restricted)
            if found:
                escaped.append((name, persona, found))
            else:
                held += 1
    assert escaped == []
    assert held == 2 * len(INJECTION_QUESTIONS)


# --- a model that obeys the injection -------------------------------------------------------------


@pytest_asyncio.fixture
async def hostile_model(
    settings: Any, model_server: HTTPServer
) -> AsyncIterator[list[dict[str, Any]]]:
    """An Ollama server whose rewrites aim at the restricted document and whose answers carry
    markup, fake citations and exfiltration links; it records every request it gets."""
    received: list[dict[str, Any]] = []
    rewrites = iter([r for _, r in HOSTILE_REWRITES] * 20)

    def ollama(request: Request) -> Response:
        body = json.loads(request.get_data())
        received.append(body)
        if not body["stream"]:
            rewrite = next(rewrites)
            if "crachá" in body["messages"][-1]["content"]:  # the hostile-document question
                rewrite = {"queries": [{"text": "perda do crachá", "type": "normalize"}]}
            content = json.dumps(rewrite)
            return Response(json.dumps({"message": {"content": content}, "done": True}))
        lines = [
            json.dumps({"message": {"content": HOSTILE_ANSWER[:40]}}),
            json.dumps({"message": {"content": HOSTILE_ANSWER[40:]}}),
            json.dumps({"message": {"content": ""}, "done": True}),
        ]
        return Response("\n".join(lines) + "\n", mimetype="application/x-ndjson")

    model_server.clear()
    model_server.expect_request("/api/chat", method="POST").respond_with_handler(ollama)
    settings.CHATRAG_LLM_BACKEND = "retrieval.pipeline.llm.OllamaChat"
    settings.CHATRAG_LLM_URL = model_server.url_for("/")
    settings.CHATRAG_LLM_MODEL = "hostile-test"
    _chat_model.cache_clear()
    yield received
    await finish_turns()
    model = chat_model()
    if model is not None:
        await model.aclose()
    _chat_model.cache_clear()


@database_sync_to_async
def _tables_intact() -> tuple[int, int]:
    return Document.objects.count(), Chunk.objects.count()


@database_sync_to_async
def _render_conversation(user: User, message_id: int) -> str:
    client = Client()
    client.force_login(user)
    conversation_id = Message.objects.get(pk=message_id).conversation_id
    return client.get(reverse("conversation", args=[conversation_id])).content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_model_obeying_injections_still_cannot_escape_or_inject(
    small_kb: Any,
    personas: dict[str, Any],
    hostile_model: list[dict[str, Any]],
    settled_socket: None,
) -> None:
    restricted = await _restricted()
    before = await _tables_intact()
    questions = [
        q
        for name, q in INJECTION_QUESTIONS
        if name
        in {
            "ignore-tenant",
            "show-all-docs",
            "fake-system-chatml",
            "sql-drop",
            "fake-fence",
        }
    ]
    for question in questions:
        for persona in ("ana", "carlos"):
            message_id, frames = await _run_turn(personas[persona], question)
            searched = await _searched_chunks(message_id)
            assert _escapes(frames, searched, restricted) == [], question
            rewrite = next(f for f in frames if f["type"] == "rewrite")
            assert rewrite["backend"] == "llm"  # the hostile queries were really searched
            done = frames[-1]
            assert done["type"] == "done"
            assert "[99]" not in done["text"]  # a citation of no passage is dropped
            html = await _render_conversation(personas[persona], message_id)
            assert_no_live_markup(html)
    # The model never received a word of the restricted passages...
    sent = json.dumps(hostile_model, ensure_ascii=False)
    for sentence in restricted[2]:
        assert sentence not in sent
    # ...SQL in its rewrites ran as bound values, not as SQL...
    assert await _tables_intact() == before
    # ...and fake chat-template tokens or fences in the question were defanged.
    answers = [r for r in hostile_model if r["stream"]]
    assert answers
    for request in answers:
        user_prompt = request["messages"][-1]["content"]
        assert "<|im_start|>" not in user_prompt
        assert user_prompt.count("</passages>") == 1 and user_prompt.count("<question>") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_injection_inside_a_document_is_data_for_the_model(
    small_kb: Any,
    personas: dict[str, Any],
    hostile_model: list[dict[str, Any]],
    settled_socket: None,
    tmp_path: Path,
) -> None:
    path = tmp_path / "pt" / "politica-de-crachas.md"
    path.parent.mkdir()
    path.write_text(HOSTILE_DOCUMENT, encoding="utf-8")

    @database_sync_to_async
    def ingest() -> None:
        report = documents_ingest(
            collection=default_collection(),
            sources=[source_from_file(path, root=tmp_path)],
            embedder=get_embedder(),
            total=1,
        )
        assert not report.errors

    await ingest()
    restricted = await _restricted()
    message_id, frames = await _run_turn(personas["carlos"], HOSTILE_DOCUMENT_QUESTION)
    sources = next(f for f in frames if f["type"] == "sources")["sources"]
    assert any("crachá" in card["title"] for card in sources)  # the hostile document was used
    assert _escapes(frames, await _searched_chunks(message_id), restricted) == []
    prompt = [r for r in hostile_model if r["stream"]][-1]["messages"][-1]["content"]
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in prompt  # passed on, inside the fence...
    assert "<|im_start|>" not in prompt and prompt.count("</passages>") == 1  # ...defanged
    assert_no_live_markup(await _render_conversation(personas["carlos"], message_id))


@pytest.mark.django_db
@pytest.mark.parametrize("chunk", ["²", "٣", "9" * 5000, "-1", "1e5", "１２"])
def test_document_page_ignores_a_chunk_id_that_is_no_number(
    personas: dict[str, User], hostile_document: Document, chunk: str
) -> None:
    """The second attack's `?chunk=²` and `?chunk=` + 5000 nines were HTTP 500s."""
    client = Client()
    client.force_login(personas["carlos"])
    response = client.get(reverse("document", args=[hostile_document.id]), {"chunk": chunk})
    assert response.status_code == 200
    assert 'aria-current="true"' not in response.content.decode()
