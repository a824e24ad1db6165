"""The promotion gate against the real database: shadow runs of two real policies on judged
tasks (the same numbers `manage.py evaluate` reports) and replays of real turns (masked text
only, as a reader of public documents)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import CommandError, call_command
from django.db import connections
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conversations.models import Message, TurnTrace
from conversations.quality.cases import eval_case_create
from conversations.quality.models import GateRun
from conversations.quality.promotion import (
    Policy,
    policy_running,
    real_turns_sample,
    turns_replay,
)
from conversations.services import conversation_create, message_store_user
from conversations.turn import turn_run
from retrieval.models import Document
from retrieval.pipeline.rewrite_llm import llm_policy
from retrieval.pipeline.rewrite_rules import POLICY_VERSION
from retrieval.services import _chat_model
from tests.conftest import DEMO_KB, SMALL_KB

pytestmark = pytest.mark.django_db(transaction=True)

DEMO = DEMO_KB.parent
# The demo's judged tasks whose documents are all in the small knowledge base.
TASK_IDS = {
    "pt-001",
    "pt-011",
    "pt-015",
    "pt-017",
    "pt-018",
    "pt-022",
    "pt-031",
    "es-001",
    "es-007",
}
CPF = "529.982.247-25"
RESTRICTED_DOC = "pt/faixas-salariais-2026"


@pytest.fixture
def judged(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A corpus folder (the small knowledge base's pages) and those tasks, as files."""
    corpus = tmp_path / "kb"
    for name in SMALL_KB:
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO_KB / f"{name}.md", corpus / f"{name}.md")
    lines = (DEMO / "eval" / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "\n".join(line for line in lines if json.loads(line)["id"] in TASK_IDS) + "\n",
        encoding="utf-8",
    )
    yield corpus, tasks
    # The commands' ORM calls ran in asgiref's worker thread: close what it opened there.
    asyncio.run(sync_to_async(connections.close_all)())


def _command(name: str, *args: str) -> str:
    out = StringIO()
    call_command(name, *args, "--quiet", stdout=out)
    return out.getvalue()


def test_a_shadow_run_of_two_policies_reports_what_evaluate_reports(
    judged: tuple[Path, Path], tmp_path: Path
) -> None:
    corpus, tasks = judged
    files = ["--tasks", str(tasks), "--corpus", str(corpus)]
    files += ["--glossary", str(DEMO / "glossary.json")]
    gate_json, eval_json = tmp_path / "gate.json", tmp_path / "eval.json"
    printed = _command(
        "gate",
        "--candidate",
        "rules",
        "--current",
        "none",
        *files,
        "--real-turns",
        "0",
        "--json",
        str(gate_json),
    )
    _command("evaluate", *files, "--rewrite", "none,rules", "--answers", "--json", str(eval_json))
    report = json.loads(gate_json.read_text(encoding="utf-8"))
    evaluation = json.loads(eval_json.read_text(encoding="utf-8"))
    modes = evaluation["modes"]

    assert report["current"]["policy"] == "none"
    assert report["candidate"]["policy"] == POLICY_VERSION
    assert (report["tasks"], report["judged"]) == (9, 9)
    groups = {(g["kind"], g["group"]): g for g in report["groups"]}
    metrics = ("recall@5", "recall@10", "mrr@10", "ndcg@10")
    for side, mode in (("current", "none"), ("candidate", "rules")):
        for metric in metrics:
            assert groups[("overall", "overall")][side][metric] == pytest.approx(
                modes[mode]["overall"][metric]
            )
            for category, figures in modes[mode]["by_category"].items():
                assert groups[("category", category)][side][metric] == pytest.approx(
                    figures[metric]
                ), (mode, category, metric)
            for language, figures in modes[mode]["by_language"].items():
                assert groups[("language", language)][side][metric] == pytest.approx(
                    figures[metric]
                )
        assert report[side]["fact_recall"] == pytest.approx(
            modes[mode]["answers"]["overall"]["fact_recall"]
        )
        assert report[side]["facts"] == modes[mode]["answers"]["overall"]["facts"]

    # Per task, from evaluate's own rows: who got worse or better, and the multi-topic
    # task's coverage (its judged documents with a passage shown).
    rows = {(r["mode"], r["id"]): r for r in evaluation["tasks"]}
    worse = sorted(i for i in TASK_IDS if rows["rules", i]["mrr@10"] < rows["none", i]["mrr@10"])
    better = sorted(i for i in TASK_IDS if rows["rules", i]["mrr@10"] > rows["none", i]["mrr@10"])
    assert sorted(report["worse_tasks"]) == worse
    assert sorted(report["better_tasks"]) == better
    assert better, "the rules should improve some of these turns (follow-ups, the glossary)"
    assert report["degradation_rate"] == pytest.approx(len(worse) / 9)
    for side, mode in (("current", "none"), ("candidate", "rules")):
        multi = rows[mode, "pt-031"]
        shown = set(multi["passages"]) & set(multi["relevant"])
        assert report[side]["source_coverage"] == pytest.approx(len(shown) / 2)
        assert report[side]["multi_topic_tasks"] == 1
        assert report[side]["model_calls"] == 0 and report[side]["tokens"] is None
    assert report["candidate"]["rewrite_p95_ms"] > 0

    # The verdict follows the criteria, and the run is kept for the admin.
    assert report["passed"] == all(c["passed"] for c in report["criteria"])
    run = GateRun.objects.get()
    assert (run.current_policy, run.candidate_policy) == ("none", POLICY_VERSION)
    assert run.passed == report["passed"] and run.report == report
    assert run.source == GateRun.Source.FILE and run.source_label == "tasks.jsonl"
    assert "verdict: " in printed and f"gate run #{run.pk}" in printed
    assert "category: follow-up" in printed and "length: short" in printed


def test_bad_policies_and_sources_are_refused_by_name(judged: tuple[Path, Path]) -> None:
    corpus, tasks = judged
    with pytest.raises(CommandError, match="CHATRAG_LLM_BACKEND"):
        _command("gate", "--candidate", "llm", "--tasks", str(tasks), "--corpus", str(corpus))
    with pytest.raises(CommandError, match="--model is for the llm policy"):
        _command("gate", "--candidate", "none", "--model", "m", "--tasks", str(tasks))
    with pytest.raises(CommandError, match="needs --corpus"):
        _command("gate", "--candidate", "none", "--tasks", str(tasks))
    with pytest.raises(CommandError, match="is the current policy"):
        _command("gate", "--candidate", "rules", "--tasks", str(tasks), "--corpus", str(corpus))
    with pytest.raises(CommandError, match="no tasks"):
        _command("gate", "--candidate", "none", "--cases")
    with pytest.raises(CommandError, match="cannot be negative"):
        _command("gate", "--candidate", "none", "--cases", "--real-turns", "-1")
    assert not GateRun.objects.exists()


def _turn(user: Any, question: str, conversation: Any = None) -> tuple[Any, Message]:
    conversation = conversation or conversation_create(user=user)
    message = message_store_user(conversation=conversation, text=question)

    async def emit(event: dict[str, Any]) -> None:
        return None

    async_to_sync(turn_run)(message_id=message.id, emit=emit)
    return conversation, message


def _ollama(httpserver: HTTPServer, bodies: list[str]) -> None:
    rewrite = {
        "queries": [{"text": "reembolso de despesas", "type": "expand", "area": None}],
        "needs_clarification": False,
        "clarification": None,
    }

    def handle(request: Request) -> Response:
        bodies.append(request.get_data(as_text=True))
        body = json.loads(request.get_data())
        reply = {"model": body["model"], "message": {"content": json.dumps(rewrite)}, "done": True}
        return Response(json.dumps(reply), mimetype="application/json")

    httpserver.expect_request("/api/chat", method="POST").respond_with_handler(handle)


def test_real_turns_are_replayed_masked_as_a_public_reader(
    small_kb: Any, personas: dict[str, Any], settings: Any, httpserver: HTTPServer
) -> None:
    # Ana's turn with her CPF, then a follow-up; Rita's question answered from the restricted
    # pay bands, then her follow-up (its window holds that answer).
    ana, _ = _turn(personas["ana"], f"meu CPF é {CPF}, como peço reembolso de despesas?")
    _turn(personas["ana"], "e para quem é PJ?", ana)
    rita, asked = _turn(personas["rita"], "qual a faixa salarial de analista pleno?")
    answer = Message.objects.get(reply_to=asked)
    restricted = Document.objects.get(external_id=RESTRICTED_DOC)
    assert restricted.pk in {s.get("document_id") for s in answer.sources}
    _, follow_up = _turn(personas["rita"], "e de sênior?", rita)
    traces = {t.message_id: t for t in TurnTrace.objects.all()}
    assert CPF not in json.dumps([t.masked_question for t in traces.values()])

    turns = real_turns_sample(limit=10)
    assert len(turns) == 4
    by_id = {t.id: t for t in turns}
    for trace in traces.values():
        replay = by_id[str(trace.pk)]
        assert replay.question == trace.masked_question  # the stored masked text, never raw
        assert CPF not in replay.question and all(CPF not in m.text for m in replay.window)
    rita_follow = by_id[str(traces[follow_up.pk].pk)]
    # Her window's answer came from a restricted page: only her own words are replayed.
    assert rita_follow.answers_left_out
    assert [m.role for m in rita_follow.window] == ["user"]
    ana_follow = by_id[
        str(min(t.pk for t in traces.values() if t.masked_question.startswith("e para")))
    ]
    assert not ana_follow.answers_left_out  # her window's answer came from public pages
    assert [m.role for m in ana_follow.window] == ["user", "assistant"]
    assert real_turns_sample(limit=2) == turns[:2]  # the latest first
    assert real_turns_sample(limit=0) == []

    # Replayed, nobody reaches the restricted page: not even Rita's own pay-band question.
    results = async_to_sync(turns_replay)(turns, Policy("rules"), None)
    assert {r.id for r in results} == set(by_id)
    assert all(RESTRICTED_DOC not in r.sources for r in results)
    assert all(r.model_calls == 0 and r.rewrite_ms > 0 for r in results)

    # An llm candidate against a real server speaking Ollama's protocol: each replayed turn
    # and judged case is one model call, and no request carries the raw CPF.
    eval_case_create(
        collection=small_kb,
        question="como peço reembolso de despesas?",
        history=[],
        documents=list(Document.objects.filter(external_id="pt/reembolso-de-despesas")),
        category="standalone",
    )
    bodies: list[str] = []
    _ollama(httpserver, bodies)
    settings.CHATRAG_LLM_BACKEND = "retrieval.pipeline.llm.OllamaChat"
    settings.CHATRAG_LLM_URL = httpserver.url_for("/")
    settings.CHATRAG_LLM_MODEL = "current-model"
    settings.CHATRAG_REWRITE_MODE = "rules"
    _chat_model.cache_clear()
    try:
        printed = _command(
            "gate",
            "--candidate",
            "llm",
            "--model",
            "candidate-model",
            "--cases",
            "--real-turns",
            "3",
        )
    finally:
        _chat_model.cache_clear()
        asyncio.run(sync_to_async(connections.close_all)())
    assert len(bodies) == 1 + 3
    assert all(json.loads(b)["model"] == "candidate-model" for b in bodies)
    assert not any(CPF in b for b in bodies)
    run = GateRun.objects.get()
    assert run.current_policy == POLICY_VERSION  # the chat's policy: CHATRAG_REWRITE_MODE
    assert run.candidate_policy == llm_policy("candidate-model")
    assert run.source_label == "cases" and run.real_turns == 3
    report = run.report
    assert report["candidate"]["model_calls"] == 4 and report["candidate"]["fell_back"] == 0
    assert report["current"]["model_calls"] == 0
    assert report["real_turns"]["n"] == 3
    assert report["real_turn_answers_left_out"] == 1  # Rita's follow-up is among the latest 3
    assert "real turns replayed     3" in printed
    # The report names turns by id and holds no text of theirs.
    stored = json.dumps(report, ensure_ascii=False)
    assert "reembolso" not in stored and "faixa" not in stored and RESTRICTED_DOC not in stored
    assert policy_running() == Policy("rules")
