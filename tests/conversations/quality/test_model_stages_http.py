"""Rerank and HyDE against a real HTTP server speaking the OpenAI protocol, on the real KB.

The server (pytest_httpserver, threaded) replies by the system prompt it is sent: the rerank's,
HyDE's, or the answer's stream. `manage.py ask` runs the turn's own pipeline; the last test
runs a real turn and reads its stored trace and its live [rewrite] frame.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import CommandError, call_command
from django.db import connections
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conversations.models import TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.trace import QUERY_TYPE_LABELS, read_trace
from conversations.turn import turn_run
from retrieval.pipeline.hyde import PROMPT_PATH as HYDE_PROMPT
from retrieval.pipeline.rerank import PROMPT_PATH as RERANK_PROMPT
from retrieval.services import _chat_model
from tests.conftest import DEMO_KB, SMALL_KB

pytestmark = pytest.mark.django_db(transaction=True)

# Ana's question finds the restricted salary table's neighbours, never the table itself.
QUESTION = "prazo para pedir reembolso de despesas com nota fiscal"
RESTRICTED_TITLE = "Tabela de faixas salariais"
HYPOTHESIS = (
    "O reembolso de despesas deve ser pedido em até 30 dias, com a nota fiscal anexada "
    "no portal de despesas."
)
ANSWER = "Em até 30 dias [1]."

Reply = Callable[[dict[str, Any]], Response]


def _completion(content: str) -> Response:
    reply = {"choices": [{"index": 0, "message": {"content": content}}]}
    return Response(json.dumps(reply), mimetype="application/json")


def _answer_stream() -> Response:
    def events() -> Iterator[bytes]:
        chunk = {"choices": [{"index": 0, "delta": {"content": ANSWER}}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        yield f"data: {json.dumps(final)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return Response(events(), mimetype="text/event-stream")


def _system(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


@pytest.fixture
def openai(settings: Any, model_server: HTTPServer) -> Iterator[dict[str, Any]]:
    """The model settings pointing at the server; `script` holds the replies by stage."""
    model_server.clear()
    script: dict[str, Any] = {"bodies": []}

    def handle(request: Request) -> Response:
        body = json.loads(request.get_data())
        script["bodies"].append(body)
        if body.get("stream"):
            return _answer_stream()
        system = _system(body)
        if system == RERANK_PROMPT.read_text(encoding="utf-8").strip():
            reply: Reply = script["rerank"]
        elif system.startswith(HYDE_PROMPT.read_text(encoding="utf-8")[:60]):
            reply = script["hyde"]
        else:
            raise AssertionError(f"an unscripted call: {system[:80]!r}")
        return reply(body)

    model_server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handle)
    settings.CHATRAG_LLM_BACKEND = "retrieval.pipeline.llm.OpenAIChat"
    settings.CHATRAG_LLM_URL = model_server.url_for("/v1")
    settings.CHATRAG_LLM_MODEL = "test-model"
    settings.CHATRAG_REWRITE_MODE = "rules"
    _chat_model.cache_clear()
    yield script
    _chat_model.cache_clear()
    model_server.check_assertions()


def _ask(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command(
        "ask", QUESTION, "--user", "ana", "--rewrite", "rules", *args, "--json", stdout=out
    )
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def _ask_text(*args: str) -> str:
    out = StringIO()
    call_command("ask", QUESTION, "--user", "ana", "--rewrite", "rules", *args, stdout=out)
    return out.getvalue()


def _sources(data: dict[str, Any]) -> list[int]:
    return [s["chunk"] for s in data["sources"]]


def _stage_bodies(script: dict[str, Any], prompt: str) -> list[dict[str, Any]]:
    return [b for b in script["bodies"] if not b.get("stream") and _system(b).startswith(prompt)]


def test_rerank_reorders_the_fused_candidates(small_kb: Any, openai: dict[str, Any]) -> None:
    fused = _ask()
    assert fused["rerank"] is None and fused["config"]["rerank"] is False
    openai["rerank"] = lambda body: _completion(json.dumps({"order": [4, 3]}))
    data = _ask("--rerank")

    record = data["rerank"]
    assert (record["status"], record["model"], record["ranked"]) == ("done", "test-model", 2)
    before = record["before"]
    assert len(before) == 10  # CHATRAG_RERANK_CANDIDATES
    assert record["after"] == [before[3], before[2], before[0], before[1], *before[4:]]
    assert [m["fused_rank"] for m in data["reranked"]][:4] == [4, 3, 1, 2]
    # The passages shown are cut from the new order; without the stage, from the fused one.
    assert _sources(data) != _sources(fused)
    assert data["sources"][0]["chunk"] == before[3]
    assert "rerank" in data["timings_ms"]
    assert any(
        n.startswith("rerank: test-model ordered the top 10 (#4, #3, #1, #2")
        for n in data["rewrite"]["notes"]
    )

    (body,) = _stage_bodies(openai, "You rank passages")
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["properties"]["order"]["maxItems"] == 10
    prompt = body["messages"][1]["content"]
    assert prompt.startswith(f"Question: {QUESTION}")
    assert prompt.count("\n[") == 10
    # Only what Ana may read reaches the model.
    assert RESTRICTED_TITLE not in prompt

    # The terminal shows the window in its new order, each with its fused rank.
    text = _ask_text("--rerank")
    block = text.split("=== Rerank (test-model): the top 10\n", 1)[1].split("\n\n", 1)[0]
    lines = block.splitlines()
    assert lines[0].split() == ["rank", "fused", "rank", "document", "·", "section"]
    assert [line.split()[:2] for line in lines[1:5]] == [
        ["1", "4"],
        ["2", "3"],
        ["3", "1"],
        ["4", "2"],
    ]


def test_only_passages_the_reader_may_read_reach_the_rerank_prompt(
    small_kb: Any, openai: dict[str, Any]
) -> None:
    openai["rerank"] = lambda body: _completion(json.dumps({"order": [1]}))
    salary = "banda P3 matriz de mérito faixa salarial"
    for user in ("rita", "ana"):
        out = StringIO()
        call_command("ask", salary, "--user", user, "--rerank", "--json", stdout=out)
        assert json.loads(out.getvalue())["rerank"]["status"] == "done"
    rita, ana = (b["messages"][1]["content"] for b in _stage_bodies(openai, "You rank passages"))
    # Rita reads the restricted salary table, and the model sees it among her candidates;
    # Ana's search never finds it, so her prompt cannot hold it.
    assert RESTRICTED_TITLE in rita
    assert RESTRICTED_TITLE not in ana and "P3" in ana


@pytest.mark.parametrize(
    "reply",
    [
        lambda body: _completion("the second passage, then the first"),
        lambda body: _completion(json.dumps({"order": [0, 99, "x"]})),
        lambda body: Response("overloaded", status=503),
    ],
    ids=["garbage", "unknown-numbers", "http-503"],
)
def test_a_bad_reply_keeps_the_fused_order(
    small_kb: Any, openai: dict[str, Any], reply: Reply
) -> None:
    fused = _ask()
    openai["rerank"] = reply
    data = _ask("--rerank")
    assert data["rerank"]["status"] == "kept"
    assert data["rerank"]["after"] == data["rerank"]["before"]
    assert _sources(data) == _sources(fused)
    assert any(e.startswith("rerank failed: ") for e in data["errors"])
    assert any(n.startswith("rerank: fused order kept (") for n in data["rewrite"]["notes"])


def test_a_rerank_past_its_deadline_keeps_the_fused_order_and_says_so(
    small_kb: Any, openai: dict[str, Any], settings: Any
) -> None:
    fused = _ask()
    settings.CHATRAG_RERANK_TIMEOUT = 0.3

    def slow(body: dict[str, Any]) -> Response:
        time.sleep(1.5)
        return _completion(json.dumps({"order": [2, 1]}))

    openai["rerank"] = slow
    data = _ask("--rerank")
    assert (data["rerank"]["status"], data["rerank"]["reason"]) == (
        "kept",
        "model timed out after 0.3s",
    )
    assert _sources(data) == _sources(fused)
    assert data["answer"] == {"text": ANSWER, "kind": "model", "why": None}  # the turn went on
    note = "rerank: fused order kept (model timed out after 0.3s)"
    assert any(n.startswith(note) for n in data["rewrite"]["notes"])
    assert "rerank failed: model timed out after 0.3s" in data["errors"]


def test_hyde_adds_a_labelled_hypothesis_that_is_never_a_source(
    small_kb: Any, openai: dict[str, Any]
) -> None:
    openai["hyde"] = lambda body: _completion(json.dumps({"passage": HYPOTHESIS}))
    data = _ask("--hyde")

    assert data["hyde"]["status"] == "done"
    (hyde,) = [q for q in data["queries"] if q["type"] == "hyde"]
    assert hyde["text"] == HYPOTHESIS
    assert hyde["weight"] == 0.7
    assert hyde["reason"] == "a hypothetical answer (never shown as a source)"
    # After the rewrite's queries; the user's own words, when searched, stay last.
    types = [q["type"] for q in data["queries"]]
    at = types.index("hyde")
    assert at > 0 and "original" not in types[:at]
    assert all(t == "original" for t in types[at + 1 :])
    # Searched on the vector leg alone: its words are the model's, not the documents'.
    assert hyde["hits"] and all(h["text_rank"] is None and h["vector_rank"] for h in hyde["hits"])
    assert any("a hypothesis, never a source" in n for n in data["rewrite"]["notes"])
    assert "hyde" in data["timings_ms"]
    # Never a source, never in the answer.
    assert all(HYPOTHESIS not in s["snippet"] for s in data["sources"])
    assert HYPOTHESIS not in data["answer"]["text"]
    (body,) = _stage_bodies(openai, "You write a short passage")
    assert body["messages"][1]["content"].startswith(f"Question: {QUESTION}")


def test_a_hyde_reply_off_the_question_searches_nothing_more(
    small_kb: Any, openai: dict[str, Any]
) -> None:
    copied = "O hotel da viagem é reservado pela agência credenciada."
    openai["hyde"] = lambda body: _completion(json.dumps({"passage": copied}))
    data = _ask("--hyde")
    assert data["hyde"]["status"] == "failed"
    assert "shares no word with the question" in data["hyde"]["reason"]
    assert [q["type"] for q in data["queries"] if q["type"] == "hyde"] == []


def test_a_turn_with_both_stages_keeps_them_in_its_trace(
    small_kb: Any, openai: dict[str, Any], personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_HYDE = True
    settings.CHATRAG_RERANK = True
    openai["hyde"] = lambda body: _completion(json.dumps({"passage": HYPOTHESIS}))
    openai["rerank"] = lambda body: _completion(json.dumps({"order": [2, 1]}))
    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    conversation = conversation_create(user=personas["ana"])
    message = message_store_user(conversation=conversation, text=QUESTION)
    async_to_sync(turn_run)(message_id=message.id, emit=emit)

    (rewrite,) = [f for f in frames if f["type"] == "rewrite"]
    assert [q["type"] for q in rewrite["queries"]].count("hyde") == 1
    assert str(QUERY_TYPE_LABELS["hyde"]) == "hipótese (HyDE)"  # the chat's label for it
    (cards,) = [f["sources"] for f in frames if f["type"] == "sources"]
    row = TurnTrace.objects.get(message=message)
    trace = read_trace(row)
    assert trace.search.hyde is not None and trace.search.hyde.status == "done"
    rerank = trace.search.rerank
    assert rerank is not None and rerank.status == "done"
    assert rerank.after[:2] == (rerank.before[1], rerank.before[0])
    assert [c["chunk_id"] for c in cards][0] == rerank.after[0]
    assert {"hyde", "rerank"} <= set(trace.timings_ms)
    assert [q.type for q in trace.searched].count("hyde") == 1
    assert any(n.startswith("rerank: test-model ordered") for n in trace.rewrite.notes)
    # The hypothesis is a query: no source card and no answer carries it.
    (done,) = [f for f in frames if f["type"] == "done"]
    assert done["text"] == ANSWER
    assert HYPOTHESIS not in json.dumps(cards, ensure_ascii=False)


def test_evaluate_measures_each_stage_set_beside_the_plain_one(
    openai: dict[str, Any], tmp_path: Path
) -> None:
    corpus = tmp_path / "kb"
    for name in SMALL_KB:
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO_KB / f"{name}.md", corpus / f"{name}.md")
    lines = (DEMO_KB.parent / "eval" / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "\n".join(line for line in lines if json.loads(line)["id"] in {"pt-017", "es-007"}) + "\n",
        encoding="utf-8",
    )
    openai["rerank"] = lambda body: _completion(json.dumps({"order": [2, 1]}))
    openai["hyde"] = lambda body: _completion(json.dumps({"passage": HYPOTHESIS}))
    report = tmp_path / "report.json"
    out = StringIO()
    args = ["--corpus", str(corpus), "--tasks", str(tasks), "--rewrite", "rules", "--quiet"]
    try:
        call_command(
            "evaluate",
            *args,
            "--stages",
            "none,rerank,hyde+rerank",
            "--json",
            str(report),
            stdout=out,
        )
        with pytest.raises(CommandError, match="unknown stage bm25"):
            call_command("evaluate", *args, "--stages", "rerank,bm25", stdout=StringIO())
    finally:
        # The command's ORM calls ran in asgiref's worker thread: close what it opened there.
        asyncio.run(sync_to_async(connections.close_all)())

    data = json.loads(report.read_text(encoding="utf-8"))
    assert list(data["modes"]) == ["rules", "rules+rerank", "rules+hyde+rerank"]
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in data["tasks"]:
        rows.setdefault(row["mode"], []).append(row)
    assert all("rerank" not in r and "hyde" not in r for r in rows["rules"])
    assert [r["rerank"]["status"] for r in rows["rules+rerank"]] == ["done", "done"]
    assert all(r["rerank"]["moved"] for r in rows["rules+rerank"])
    assert all(r["hyde"]["status"] in {"done", "failed"} for r in rows["rules+hyde+rerank"])
    latency = data["modes"]["rules+rerank"]["latency_ms"]
    assert "rerank" in latency and "rerank" not in data["modes"]["rules"]["latency_ms"]
    table = out.getvalue()
    assert "rules+rerank      overall" in table and "rules+hyde+rerank overall" in table
