"""The OpenAI-compatible backend against a real llama.cpp server (chatrag.dev.localmodel).

SmolLM2-135M-Instruct, served in this process by xllamacpp: structured rewrites through
`json_schema` and through the `json_object` fallback, a streamed answer over SSE, a stream
stopped mid-way, deadlines, and `manage.py evaluate --rewrite llm` on demo turns. The model
is weak; these tests check the wire and the pipeline around it, never the wording of its
answers. Without the `local` extra and the model file they skip, unless
CHATRAG_REQUIRE_LOCAL_MODEL=1 (CI), where they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import date
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connections
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from chatrag.dev import server as devserver
from chatrag.dev.localmodel import BACKEND, MODEL_NAME, LocalModel, serve, unavailable_reason
from retrieval.pipeline.fusion import Hit, MergedHit
from retrieval.pipeline.hyde import build_hyde_messages, hyde_schema
from retrieval.pipeline.llm import ChatMessage, LLMTimeout, OpenAIChat
from retrieval.pipeline.model_stages import HydeSettings, RerankSettings, hyde_stage, rerank_stage
from retrieval.pipeline.rerank import build_rerank_messages, rerank_schema
from retrieval.pipeline.rewrite_llm import (
    FALLBACK_NOTE,
    build_rewrite_messages,
    collect_glossary_hits,
    rewrite_with_llm,
)
from retrieval.pipeline.rewrite_parse import LLM_QUERY_TYPES, parse_rewrite_output, rewrite_schema
from retrieval.pipeline.types import (
    GlossaryEntry,
    HistoryMessage,
    RewriteInput,
    RewriteResult,
    SearchQuery,
)
from retrieval.services import _chat_model
from tests.conftest import DEMO_KB, SMALL_KB

pytestmark = [pytest.mark.local_model, pytest.mark.slow]

DEMO = DEMO_KB.parent
# Generous: these are deadlines for a CPU model on shared cores, not expectations of speed.
SLOW = 300.0
INPUT = RewriteInput(
    question="e para quem é PJ?",
    history=(
        HistoryMessage("user", "Como peço reembolso de despesas de viagem?"),
        HistoryMessage("assistant", "Abra uma solicitação no portal de despesas com as notas."),
    ),
    glossary=(
        GlossaryEntry("PJ", "pessoa jurídica", "Financeiro"),
        GlossaryEntry("CLT", "Consolidação das Leis do Trabalho", "RH"),
    ),
    max_queries=2,
    today=date(2026, 3, 14),
    language="pt",
)
# A reply that goes on for many tokens, so that stopping it early is seen in the server's count.
COUNTING = [ChatMessage("user", "Count from 1 to 40, one number per line.")]


def _require_local_model() -> None:
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CHATRAG_REQUIRE_LOCAL_MODEL") == "1":
            pytest.fail(f"{reason} (CHATRAG_REQUIRE_LOCAL_MODEL=1)", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def local_model() -> Iterator[LocalModel]:
    _require_local_model()
    with serve(max_tokens=256) as model:
        yield model


def _rules_fallback() -> RewriteResult:
    return RewriteResult(queries=[], backend="rules")


def _assert_follows_rewrite_schema(raw: str, max_queries: int) -> dict[str, Any]:
    """The reply is JSON of exactly the schema's shape (no repair allowed)."""
    data = json.loads(raw)
    assert set(data) == {"queries", "needs_clarification", "clarification"}
    assert isinstance(data["needs_clarification"], bool)
    assert isinstance(data["queries"], list) and len(data["queries"]) <= max_queries
    for query in data["queries"]:
        assert set(query) == {"text", "type", "area"}
        assert isinstance(query["text"], str)
        assert query["type"] in LLM_QUERY_TYPES
        assert query["area"] is None or isinstance(query["area"], str)
    clarification = data["clarification"]
    if clarification is not None:
        assert set(clarification) == {"question", "options"}
        assert all(isinstance(option, str) for option in clarification["options"])
    return dict(data)


async def _metric(model: LocalModel, name: str) -> float:
    """One counter of the server's Prometheus page (`llamacpp:<name>`)."""
    async with httpx.AsyncClient() as client:
        page = (await client.get(f"{model.address}/metrics", timeout=30)).text
    for line in page.splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[1])
    raise AssertionError(f"llamacpp:{name} not in the metrics")


async def _wait_idle(model: LocalModel) -> None:
    """Wait until the server has no request in progress (a stopped one is cancelled first)."""
    for _ in range(600):
        if await _metric(model, "requests_processing") == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the server stayed busy for a minute")


# --- structured rewrites ----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_structured_rewrite_through_json_schema(local_model: LocalModel) -> None:
    messages = build_rewrite_messages(INPUT, collect_glossary_hits(INPUT))
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        raw = await model.complete_json(messages, rewrite_schema(INPUT.max_queries), timeout=SLOW)
        assert model.use_json_object is False  # the server took json_schema itself

    _assert_follows_rewrite_schema(raw, INPUT.max_queries)
    parsed = parse_rewrite_output(raw, max_queries=INPUT.max_queries, max_query_chars=300)
    assert parsed.queries or parsed.needs_clarification
    assert all(query.text.strip() for query in parsed.queries)


@pytest.mark.asyncio
async def test_a_server_that_refuses_json_schema_gets_json_object(
    local_model: LocalModel, httpserver: HTTPServer
) -> None:
    # An older server in front of the real one: it refuses json_schema, forwards the rest.
    formats: list[dict[str, Any]] = []

    def older_server(request: Request) -> Response:
        body = json.loads(request.get_data())
        formats.append(body["response_format"])
        if body["response_format"]["type"] == "json_schema":
            error = {"error": {"message": "response_format json_schema is not supported"}}
            return Response(json.dumps(error), status=400, content_type="application/json")
        reply = httpx.post(
            f"{local_model.url}/chat/completions", content=request.get_data(), timeout=SLOW
        )
        return Response(reply.content, status=reply.status_code, content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
        older_server
    )
    async with OpenAIChat(httpserver.url_for("/v1"), MODEL_NAME) as model:
        result = await rewrite_with_llm(INPUT, model, timeout=SLOW, fallback=_rules_fallback)
        assert model.use_json_object is True

    assert [f["type"] for f in formats] == ["json_schema", "json_object"]
    assert formats[1]["schema"] == rewrite_schema(INPUT.max_queries)  # llama.cpp enforces it
    assert (result.backend, result.model, result.error) == ("llm", MODEL_NAME, None)
    assert result.queries or result.needs_clarification
    assert len(result.queries) <= INPUT.max_queries


# --- streaming --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_streamed_answer_over_sse(local_model: LocalModel) -> None:
    await _wait_idle(local_model)
    decoded = await _metric(local_model, "n_decode_total")
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        chunks = [chunk async for chunk in model.stream(COUNTING, timeout=SLOW)]

    # The stream ended with its finish (else LLMProtocolError), one delta per token or so.
    assert len(chunks) > 10
    assert all(chunks)
    assert "2" in "".join(chunks)
    await _wait_idle(local_model)
    assert await _metric(local_model, "n_decode_total") - decoded >= len(chunks)


@pytest.mark.asyncio
async def test_stopping_mid_stream_stops_the_generation(local_model: LocalModel) -> None:
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        await _wait_idle(local_model)
        before = await _metric(local_model, "n_decode_total")
        whole = [chunk async for chunk in model.stream(COUNTING, timeout=SLOW)]
        await _wait_idle(local_model)
        full_run = await _metric(local_model, "n_decode_total") - before

        before = await _metric(local_model, "n_decode_total")
        stream = model.stream(COUNTING, timeout=SLOW)
        shown = [await anext(stream) for _ in range(3)]
        await stream.aclose()  # what a turn does when the user presses stop
        await _wait_idle(local_model)
        stopped_run = await _metric(local_model, "n_decode_total") - before

    assert shown == whole[:3]  # greedy decoding: the same reply, cut short
    assert full_run > 20
    # The server noticed the closed connection and cancelled: far fewer tokens than a full run.
    assert stopped_run < full_run / 2


# --- deadlines --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_rewrite_past_its_deadline_falls_back_and_the_server_serves_on(
    local_model: LocalModel,
) -> None:
    # A question the server has not seen: its prompt is evaluated afresh, never from cache.
    inp = RewriteInput(question=f"e para quem é PJ? ({uuid.uuid4().hex})", history=INPUT.history)
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        result = await rewrite_with_llm(inp, model, timeout=0.02, fallback=_rules_fallback)
        assert result.backend == "rules"
        assert result.error is not None and result.error.startswith("llm timeout after")
        assert FALLBACK_NOTE in result.notes

        schema = {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
            "additionalProperties": False,
        }
        question = [ChatMessage("user", 'Answer {"ok": true} in JSON.')]
        raw = await model.complete_json(question, schema, timeout=SLOW)
    assert isinstance(json.loads(raw)["ok"], bool)


@pytest.mark.asyncio
async def test_a_stream_that_waits_too_long_for_a_chunk_times_out(
    local_model: LocalModel,
) -> None:
    # A few hundred tokens the server has not seen: far more than 20 ms of work on any CPU,
    # little enough that the server is soon free again (it cancels at its first token).
    document = (DEMO_KB / "pt" / "ferias-regras-gerais.md").read_text(encoding="utf-8")[:1000]
    messages = [ChatMessage("user", f"{uuid.uuid4().hex}\n{document}\nSummarise this.")]
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        with pytest.raises(LLMTimeout):
            async for _ in model.stream(messages, timeout=0.02):
                pass


# --- the evaluation ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_evaluate_rewrites_demo_turns_with_the_local_model(
    local_model: LocalModel, settings: Any, tmp_path: Path
) -> None:
    corpus = tmp_path / "kb"
    for name in SMALL_KB:
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO_KB / f"{name}.md", corpus / f"{name}.md")
    # Two of the demo's follow-ups, one per language: the rewrite has a topic to carry.
    lines = (DEMO / "eval" / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    chosen = [line for line in lines if json.loads(line)["id"] in {"pt-017", "es-007"}]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    settings.CHATRAG_LLM_BACKEND = BACKEND
    settings.CHATRAG_LLM_URL = local_model.url
    settings.CHATRAG_LLM_MODEL = MODEL_NAME
    settings.CHATRAG_REWRITE_TIMEOUT = SLOW
    _chat_model.cache_clear()
    report = tmp_path / "report.json"
    out = StringIO()
    try:
        call_command(
            "evaluate",
            "--corpus",
            str(corpus),
            "--tasks",
            str(tasks),
            "--glossary",
            str(DEMO / "glossary.json"),
            "--rewrite",
            "llm",
            "--json",
            str(report),
            "--quiet",
            stdout=out,
        )
    finally:
        _chat_model.cache_clear()
        # The command's ORM calls ran in asgiref's worker thread: close what it opened there.
        asyncio.run(sync_to_async(connections.close_all)())

    rows = json.loads(report.read_text(encoding="utf-8"))["tasks"]
    assert sorted(row["id"] for row in rows) == ["es-007", "pt-017"]
    # Every rewrite came from the model (a fallback would record the rules' policy).
    assert all(row["policy"].startswith(f"llm/{MODEL_NAME}/prompt-") for row in rows)
    assert all(row["queries"] or row["clarified"] for row in rows)
    assert "llm        overall" in out.getvalue()


# --- the optional model stages ------------------------------------------------------------------


def _window() -> list[MergedHit]:
    """Four demo passages as the fused candidates (the text of each page's first section)."""
    names = [
        "pt/reembolso-de-despesas",
        "pt/ferias-regras-gerais",
        "pt/reembolso-de-despesas-prestadores-pj",
        "pt/vale-refeicao-regra-geral",
    ]
    out = []
    for number, name in enumerate(names, start=1):
        text = (DEMO_KB / f"{name}.md").read_text(encoding="utf-8").split("---", 2)[2]
        hit = Hit(number, number, name, name, "", text[:600], 0, "", number, number, 0.03)
        out.append(MergedHit(hit=hit, score=1.0 / number))
    return out


@pytest.mark.asyncio
async def test_a_rerank_call_completes_and_keeps_every_candidate(local_model: LocalModel) -> None:
    window = _window()
    messages = build_rerank_messages(
        question="e para quem é PJ?",
        meanings=["reembolso de despesas para prestador PJ (pessoa jurídica)"],
        window=window,
        passage_chars=300,
    )
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        raw = await model.complete_json(messages, rerank_schema(len(window)), timeout=SLOW)
        ranked, record = await rerank_stage(
            question="e para quem é PJ?",
            queries=[SearchQuery("reembolso de despesas para prestador PJ", "expand")],
            merged=window,
            model=model,
            settings=RerankSettings(candidates=4, timeout=SLOW),
        )
    # llama.cpp's constrained decoding holds the reply to the schema: numbers of the window.
    data = json.loads(raw)
    assert set(data) == {"order"} and len(data["order"]) <= len(window)
    assert all(isinstance(n, int) and 1 <= n <= len(window) for n in data["order"])
    # The stage ended with the model's answer (never a failure) and dropped nothing.
    assert record.status in {"done", "kept"} and not record.reason.startswith("model ")
    assert sorted(m.chunk_id for m in ranked) == [1, 2, 3, 4]
    assert record.before == [1, 2, 3, 4] and sorted(record.after) == [1, 2, 3, 4]


@pytest.mark.asyncio
async def test_a_hyde_call_completes_within_its_schema(local_model: LocalModel) -> None:
    settings = HydeSettings(max_chars=200, timeout=SLOW)
    question = "quantos dias de férias eu tenho por ano?"
    messages = build_hyde_messages(question=question, meanings=[], language="pt", max_chars=200)
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        raw = await model.complete_json(messages, hyde_schema(200), timeout=SLOW)
        query, record = await hyde_stage(
            question=question,
            queries=[SearchQuery(question, "normalize")],
            language="pt",
            model=model,
            settings=settings,
            weight=0.7,
        )
    data = json.loads(raw)
    assert set(data) == {"passage"} and isinstance(data["passage"], str)
    # The model answered: a hypothesis to search, or a reply the stage refused for its content.
    if record.status == "done":
        assert query is not None and query.type == "hyde" and len(query.text) <= 200
    else:
        assert query is None and record.reason.startswith("unusable reply: ")


@pytest.mark.django_db(transaction=True)
def test_ask_with_both_stages_runs_end_to_end(
    local_model: LocalModel, small_kb: Any, settings: Any
) -> None:
    settings.CHATRAG_LLM_BACKEND = BACKEND
    settings.CHATRAG_LLM_URL = local_model.url
    settings.CHATRAG_LLM_MODEL = MODEL_NAME
    settings.CHATRAG_LLM_TIMEOUT = SLOW
    settings.CHATRAG_HYDE_TIMEOUT = SLOW
    settings.CHATRAG_RERANK_TIMEOUT = SLOW
    _chat_model.cache_clear()
    out = StringIO()
    try:
        question = "prazo para pedir reembolso de despesas com nota fiscal"
        args = ["--user", "ana", "--rewrite", "rules", "--rerank", "--hyde", "--json"]
        call_command("ask", question, *args, stdout=out)
    finally:
        _chat_model.cache_clear()
    data = json.loads(out.getvalue())
    assert data["rerank"]["status"] in {"done", "kept"}
    assert not data["rerank"]["reason"].startswith("model ")  # the model answered in time
    assert sorted(data["rerank"]["after"]) == sorted(data["rerank"]["before"])
    assert data["hyde"]["status"] == "done" or data["hyde"]["reason"].startswith("unusable reply")
    assert {"hyde", "rerank"} <= set(data["timings_ms"])
    assert data["sources"] and data["answer"]["text"]


# --- the ways to start it ---------------------------------------------------------------------


def test_the_command_line_runs_a_command_against_its_server() -> None:
    _require_local_model()
    probe = (
        "import os, urllib.request; url = os.environ['CHATRAG_LLM_URL']; "
        "status = urllib.request.urlopen(url + '/models').status; "
        "print(url, os.environ['CHATRAG_LLM_MODEL'], status); raise SystemExit(3)"
    )
    command = [sys.executable, "-m", "chatrag.dev.localmodel", "--port", "0"]
    done = subprocess.run(
        [*command, "--", sys.executable, "-c", probe],
        cwd=DEMO.parent,
        capture_output=True,
        text=True,
        timeout=SLOW,
        check=False,
    )
    assert done.returncode == 3, done.stderr  # the command's own exit status
    url, name, status = done.stdout.split()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert (name, status) == (MODEL_NAME, "200")


def test_the_dev_server_serves_the_model_to_its_children(monkeypatch: Any) -> None:
    _require_local_model()
    names = ["CHATRAG_LLM_BACKEND", "CHATRAG_LLM_URL", "CHATRAG_LLM_MODEL", "CHATRAG_LLM_API_KEY"]
    for name in [*names, "CHATRAG_REWRITE_TIMEOUT", "CHATRAG_LLM_TIMEOUT"]:
        monkeypatch.setenv(name, "")  # restored (unset) after the test
        monkeypatch.delenv(name)
    with ExitStack() as stack:
        devserver._start_local_model(stack)
        url = os.environ["CHATRAG_LLM_URL"]
        assert os.environ["CHATRAG_LLM_BACKEND"] == BACKEND
        assert os.environ["CHATRAG_REWRITE_TIMEOUT"] == "60"
        assert httpx.get(f"{url}/models", timeout=SLOW).json()["data"][0]["id"] == MODEL_NAME
    with pytest.raises(httpx.ConnectError):  # stopped with the dev server
        httpx.get(f"{url}/models", timeout=SLOW)


# --- the model's answer, checked ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_local_models_answer_is_shown_only_when_it_stands(
    local_model: LocalModel,
) -> None:
    # The small model's wording is not ours to test: whatever it writes, the turn shows it
    # only when it cites a passage, does not loop and is in the turn's language; otherwise
    # the extractive answer, with the note and the reason.
    from retrieval.pipeline.answer import label
    from retrieval.pipeline.answer.check import model_answer_problem
    from retrieval.pipeline.respond import answer_turn
    from tests.retrieval.pipeline.test_respond import _outcome

    outcome = _outcome()
    async with OpenAIChat(local_model.url, MODEL_NAME) as model:
        answer = await answer_turn(
            outcome=outcome,
            language="pt",
            model=model,
            today=date(2026, 3, 14),
            model_timeout=SLOW,
        )
    if answer.kind == "model":
        assert model_answer_problem(answer.text, passage_count=1, language="pt") is None
    else:
        assert answer.kind == "extractive"
        assert answer.error.startswith("the model's answer was replaced") or (
            answer.error == "the model returned an empty answer"
        )
        if answer.error.startswith("the model's answer was replaced"):
            assert answer.text.startswith(label("model_rejected", "pt") + "\n\n")
        assert "30 dias de férias" in answer.text
