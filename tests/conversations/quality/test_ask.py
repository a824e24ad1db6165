"""`manage.py ask` against the real database and the small knowledge base.

The command runs the turn's own pipeline (`retrieve`, then the turn's answer steps); these
tests read what it prints: the [rewrite] block, each query's hits, the sources and the answer.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import CommandError, call_command
from django.utils import timezone
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from conversations.models import TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.turn import turn_run
from retrieval.pipeline.rewrite_llm import llm_policy
from retrieval.pipeline.rewrite_rules import POLICY_VERSION
from retrieval.services import _chat_model, retrieval_settings

pytestmark = pytest.mark.django_db(transaction=True)

RESTRICTED_DOC = "pt/faixas-salariais-2026"
HISTORY = [
    {"role": "user", "text": "como funciona o reembolso de despesas?"},
    {"role": "assistant", "text": "Você envia as notas pelo sistema em até 30 dias [1]."},
]


def _ask(*args: str) -> str:
    out = StringIO()
    call_command("ask", *args, stdout=out)
    return out.getvalue()


def _ask_json(*args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_ask(*args, "--json"))
    return data


def _history_file(tmp_path: Path, history: object) -> str:
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_follow_up_with_rules_carries_the_topic_and_prints_every_block(
    small_kb: Any, tmp_path: Path
) -> None:
    out = _ask("e para quem é PJ?", "--history-file", _history_file(tmp_path, HISTORY))
    head, _, rest = out.partition("=== Sources ===")
    assert head.startswith("[rewrite] rules · policy " + POLICY_VERSION)
    assert "original: e para quem é PJ?" in head
    assert "window:   2 messages (user, assistant)" in head
    assert "topic:    reembolso de despesas" in head
    assert "glossary: PJ → prestador de serviço pessoa jurídica" in head
    assert "→ q1 " in head and "contextual" in head and "because: " in head
    # Each query's hits, with both legs' ranks and the fused score.
    assert "=== q1 " in head
    assert "rank  vec  txt  score     fused" in head
    assert "pt/reembolso-de-despesas-prestadores-pj" in head
    assert "=== Answer (extractive) ===" in rest
    assert "[1]" in rest.split("=== Answer", 1)[0]


def test_the_same_follow_up_without_rewrite_searches_the_words_as_typed(
    small_kb: Any, tmp_path: Path
) -> None:
    history = _history_file(tmp_path, HISTORY)
    plain = _ask_json("e para quem é PJ?", "--history-file", history, "--rewrite", "none")
    assert plain["rewrite"]["policy"] == "none"
    queries = [(q["text"], q["type"]) for q in plain["queries"]]
    assert queries == [("e para quem é PJ?", "normalize")]
    assert plain["rewrite"]["topic"] is None
    rules = _ask_json("e para quem é PJ?", "--history-file", history, "--rewrite", "rules")
    assert rules["rewrite"]["policy"] == POLICY_VERSION
    assert any("reembolso" in q["text"] for q in rules["queries"])


def test_a_country_the_conversation_fixed_is_not_outvoted_by_a_looser_query(
    small_kb: Any, tmp_path: Path
) -> None:
    # The browser case of issue 12: Chile's vacation days, then resigning before taking
    # them. The user's own words alone pull up Spain's sibling page just as well.
    history = _history_file(
        tmp_path,
        [
            {"role": "user", "text": "¿cuántos días de vacaciones tengo en Chile?"},
            {"role": "assistant", "text": "En Chile son 15 días hábiles de feriado legal [1]."},
        ],
    )
    data = _ask_json("¿y si renuncio antes de tomarlas?", "--history-file", history)
    assert data["rewrite"]["countries"] == ["chile"]
    assert any(n.startswith("country filter: chile") for n in data["rewrite"]["notes"])
    documents = [s["document"] for s in data["sources"]]
    assert documents[0] == "es/vacaciones-chile"
    if "es/vacaciones-espana" in documents:
        assert documents.index("es/vacaciones-espana") > documents.index("es/vacaciones-chile")


def test_a_department_the_question_names_puts_its_pages_first(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    # Issue 15: "no financeiro" is a typed filter, shown in the trace, applied as a
    # preference; only departments of the documents the reader may read count.
    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.services import Section, SourceDocument, documents_ingest
    from retrieval.services import _areas, collection_areas, scope_for_user

    text = "O reembolso de despesas de viagem é pedido com as notas fiscais em até 30 dias."
    sources = [
        SourceDocument("pt/reembolso-rh", "Reembolso de despesas", (Section("", text),), area="rh"),
        SourceDocument(
            "pt/reembolso-financeiro",
            "Pagamentos da tesouraria",
            (Section("", "Os reembolsos aprovados são pagos pela tesouraria às sextas."),),
            area="financeiro",
        ),
        SourceDocument(
            "pt/contratos-juridico",
            "Contratos com fornecedores",
            (Section("", "Contratos são revisados pelo jurídico em 5 dias úteis."),),
            area="juridico",
            groups=("rh-restrito",),
        ),
    ]
    report = documents_ingest(
        collection=small_kb, sources=sources, embedder=get_embedder(), total=len(sources)
    )
    assert not report.errors, report.errors
    _areas.clear()
    ana = scope_for_user(user=personas["ana"], collection=small_kb)
    rita = scope_for_user(user=personas["rita"], collection=small_kb)
    assert "juridico" not in collection_areas(scope=ana)
    assert "juridico" in collection_areas(scope=rita)

    data = _ask_json("como peço reembolso de despesas no financeiro?")
    assert data["rewrite"]["areas"] == ["financeiro"]
    assert any(n.startswith("area filter: financeiro") for n in data["rewrite"]["notes"])
    assert data["sources"][0]["document"] == "pt/reembolso-financeiro"
    plain = _ask_json("como peço reembolso de despesas?")
    assert plain["rewrite"]["areas"] == []
    assert plain["sources"][0]["document"] != "pt/reembolso-financeiro"
    # A department only restricted documents have is no filter for Ana (nor a trace note).
    hidden = _ask_json("quanto tempo leva a revisão de contratos no jurídico?", "--user", "ana")
    assert hidden["rewrite"]["areas"] == []


def test_sources_and_answer_are_the_turns_own(small_kb: Any, personas: dict[str, Any]) -> None:
    """The same question as a real turn of Ana's: the same cut, the same extractive answer."""
    question = "prazo para pedir reembolso de despesas com nota fiscal"
    data = _ask_json(question, "--user", "ana")
    settings = retrieval_settings()
    sources = data["sources"]
    assert 0 < len(sources) <= settings.passages
    assert [s["n"] for s in sources] == list(range(1, len(sources) + 1))
    starred = {h["chunk"] for q in data["queries"] for h in q["hits"] if h["passage"]}
    assert starred <= {s["chunk"] for s in sources}
    for key in ("mask", "rewrite", "embed", "search", "merge"):
        assert key in data["timings_ms"]

    frames: list[dict[str, Any]] = []

    async def emit(event: dict[str, Any]) -> None:
        frames.append(event)

    conversation = conversation_create(user=personas["ana"])
    message = message_store_user(conversation=conversation, text=question)
    async_to_sync(turn_run)(message_id=message.id, emit=emit)
    (cards,) = [f["sources"] for f in frames if f["type"] == "sources"]
    (done,) = [f for f in frames if f["type"] == "done"]
    assert [c["chunk_id"] for c in cards] == [s["chunk"] for s in sources]
    assert (data["answer"]["text"], data["answer"]["kind"]) == (done["text"], "extractive")
    assert data["answer"]["why"]["lines"]  # the extractive answer says why its lines
    assert TurnTrace.objects.get(message=message).rewrite["policy"] == data["rewrite"]["policy"]


def test_history_as_plain_strings_alternating_user_and_assistant(
    small_kb: Any, tmp_path: Path
) -> None:
    history = _history_file(tmp_path, [m["text"] for m in HISTORY])
    data = _ask_json("e para quem é PJ?", "--history-file", history)
    assert [m["role"] for m in data["window"]] == ["user", "assistant"]
    assert data["rewrite"]["topic"] == "reembolso de despesas"


def test_without_user_only_public_documents_and_with_user_their_own(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    question = "banda P3 matriz de mérito faixa salarial"
    public = _ask_json(question)
    assert public["reader"].startswith("a reader of every public document")
    found = {h["document"] for q in public["queries"] for h in q["hits"]}
    assert RESTRICTED_DOC not in found
    assert RESTRICTED_DOC not in {s["document"] for s in public["sources"]}
    rita = _ask_json(question, "--user", "rita")
    assert rita["reader"] == "rita (groups: rh-restrito)"
    assert rita["sources"][0]["document"] == RESTRICTED_DOC
    ana = _ask_json(question, "--user", "ana")
    assert RESTRICTED_DOC not in {h["document"] for q in ana["queries"] for h in q["hits"]}


def test_one_leg_alone_leaves_the_other_out(small_kb: Any) -> None:
    question = "prazo para pedir reembolso de despesas com nota fiscal"

    def hits(legs: str) -> list[dict[str, Any]]:
        data = _ask_json(question, "--legs", legs, "--rewrite", "none")
        assert data["config"]["legs"] == legs
        return [h for q in data["queries"] for h in q["hits"]]

    text, vector, hybrid = hits("text"), hits("vector"), hits("hybrid")
    assert text and all(h["vector_rank"] is None and h["text_rank"] for h in text)
    assert vector and all(h["text_rank"] is None and h["vector_rank"] for h in vector)
    # One leg alone ranks in that leg's own order.
    assert [h["text_rank"] for h in text] == sorted(h["text_rank"] for h in text)
    assert [h["vector_rank"] for h in vector] == sorted(h["vector_rank"] for h in vector)
    assert any(h["vector_rank"] and h["text_rank"] for h in hybrid)


def test_the_model_stages_say_they_need_a_model_server(small_kb: Any) -> None:
    out = _ask("quantos dias de férias eu tenho por ano?", "--rerank", "--hyde")
    assert "note: hyde: skipped (no model server)" in out
    assert "note: rerank: skipped (no model server)" in out
    assert "=== Rerank" not in out
    data = _ask_json("quantos dias de férias eu tenho por ano?", "--rerank")
    assert data["rerank"]["status"] == "skipped" and data["hyde"] is None


def test_small_talk_searches_nothing_and_shows_no_sources(small_kb: Any) -> None:
    out = _ask("obrigado!")
    assert "small talk (thanks): nothing searched" in out
    assert "(the turn shows none: it is small talk)" in out
    assert "=== Answer (small talk) ===" in out


def test_bad_inputs_are_reported_by_name(small_kb: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "robot", "text": "x"}]', encoding="utf-8")
    with pytest.raises(CommandError, match="bad history message"):
        _ask("oi", "--history-file", str(bad))
    with pytest.raises(CommandError, match="no active user 'nobody'"):
        _ask("oi", "--user", "nobody")
    with pytest.raises(CommandError, match="missing.json"):
        _ask("oi", "--history-file", str(tmp_path / "missing.json"))


def test_llm_rewrite_gets_todays_date_and_records_its_policy(
    small_kb: Any, settings: Any, httpserver: HTTPServer, tmp_path: Path
) -> None:
    """Against a real local server speaking Ollama's protocol: the date reaches the prompt."""
    rewrite = {
        "queries": [{"text": "reembolso de despesas prestador PJ", "type": "expand", "area": None}],
        "needs_clarification": False,
        "clarification": None,
    }
    bodies: list[dict[str, Any]] = []

    def handle(request: Request) -> Response:
        body = json.loads(request.get_data())
        bodies.append(body)
        if body.get("stream"):  # the answer: one piece, then done
            lines = [
                {"message": {"content": "Só se o contrato prever [1]."}, "done": False},
                {"message": {"content": ""}, "done": True},
            ]
            return Response(
                "".join(json.dumps(line) + "\n" for line in lines),
                mimetype="application/x-ndjson",
            )
        content = json.dumps(rewrite)
        reply = {"model": body["model"], "message": {"content": content}, "done": True}
        return Response(json.dumps(reply), mimetype="application/json")

    httpserver.expect_request("/api/chat", method="POST").respond_with_handler(handle)
    settings.CHATRAG_LLM_BACKEND = "retrieval.pipeline.llm.OllamaChat"
    settings.CHATRAG_LLM_URL = httpserver.url_for("/")
    settings.CHATRAG_LLM_MODEL = "test-model"
    _chat_model.cache_clear()
    try:
        data = _ask_json(
            "e para quem é PJ?",
            "--history-file",
            _history_file(tmp_path, HISTORY),
            "--rewrite",
            "llm",
        )
    finally:
        _chat_model.cache_clear()
    system = bodies[0]["messages"][0]["content"]
    assert f"Today's date: {timezone.localdate().isoformat()}" in system
    assert data["rewrite"]["backend"] == "llm"
    assert data["rewrite"]["policy"] == llm_policy("test-model")
    assert data["queries"][0]["reason"].startswith("model: ")
    assert data["answer"] == {"text": "Só se o contrato prever [1].", "kind": "model", "why": None}
    assert data["rerank"] is None  # off unless asked (the stages' own tests ask)
    httpserver.check_assertions()


def test_explain_prints_why_each_line_of_the_answer_was_chosen(
    small_kb: Any, tmp_path: Path
) -> None:
    history = _history_file(tmp_path, HISTORY)
    out = _ask("e para quem é PJ?", "--history-file", history, "--explain")
    answer = out.split("=== Answer (extractive) ===", 1)[1]
    why = answer.split("=== Why these lines (covers ", 1)[1]
    coverage = float(why.split(" ", 1)[0])
    assert 0 < coverage <= 1 and "; answered) ===" in why
    assert "score  page  source  says · [section] line" in why
    data = _ask_json("e para quem é PJ?", "--history-file", history)
    lines = data["answer"]["why"]["lines"]
    assert lines and all(line["score"] > 0 for line in lines)
    # Each line printed is one the answer quotes, with its source card.
    for line in lines:
        assert line["text"][:40] in answer and f"[{line['n']}]" in why
        # ... and the section of its page it was taken from.
        if line["section"]:
            assert f"[{line['section']}] {line['text'][:40]}" in why
    assert any(line["section"] for line in lines)
    # "PJ" is found through the glossary: prestador de serviço pessoa jurídica.
    assert "jurid" in {s for line in lines for s in line["says"]}
    # ... and what weighed most for it in the line model, printed under it.
    assert all(line["features"] for line in lines)
    name, value = lines[0]["features"][0]
    assert f"line model: {name} {value:+.2f}" in why


def test_without_explain_the_why_is_not_printed(small_kb: Any, tmp_path: Path) -> None:
    history = _history_file(tmp_path, HISTORY)
    assert "=== Why these lines" not in _ask("e para quem é PJ?", "--history-file", history)
