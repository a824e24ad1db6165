"""Every rewrite records the policy that produced it, and the rewrite receives today's date.

Pure: `retrieve` runs with a search engine that finds nothing and a scripted chat model.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import date
from pathlib import Path
from typing import Any

from retrieval.pipeline.fusion import Hit
from retrieval.pipeline.llm import LLMHTTPError
from retrieval.pipeline.plan import decide
from retrieval.pipeline.retrieve import (
    RetrievalOutcome,
    RetrievalSettings,
    RewriteMode,
    retrieve,
    search_queries,
)
from retrieval.pipeline.rewrite_llm import PROMPT_PATH, llm_policy, prompt_digest
from retrieval.pipeline.rewrite_parse import rewrite_schema
from retrieval.pipeline.rewrite_rules import POLICY_VERSION
from retrieval.pipeline.search import Scope, SearchRequest
from retrieval.pipeline.types import (
    GlossaryEntry,
    HistoryMessage,
    LexiconView,
    RewriteResult,
    SearchQuery,
)
from tests.fakes import FakeChat, FakeSearcher

TODAY = date(2025, 3, 14)
REPLY = json.dumps(
    {
        "queries": [{"text": "férias por ano", "type": "normalize", "area": None}],
        "needs_clarification": False,
        "clarification": None,
    }
)


def NothingFound() -> FakeSearcher:  # noqa: N802 (reads as the fake it builds)
    """A search whose every search comes back empty."""
    return FakeSearcher()


def _retrieve(mode: RewriteMode, model: FakeChat | None = None, **extra: Any) -> RetrievalOutcome:
    return asyncio.run(
        retrieve(
            question="quantos dias de férias eu tenho?",
            history=[HistoryMessage("user", "oi")],
            glossary=[],
            scope=Scope(collection_id=1),
            engine=NothingFound(),
            embedder=None,
            lexicon=lambda words: LexiconView(),
            settings=RetrievalSettings(mode=mode),
            model=model,
            **extra,
        )
    )


def test_the_llm_rewrite_prompt_carries_todays_date() -> None:
    model = FakeChat([REPLY])
    _retrieve("llm", model, today=TODAY)
    system = model.calls[0].messages[0].content
    assert "Today's date: 2025-03-14" in system


def test_without_a_date_the_prompt_says_unknown() -> None:
    model = FakeChat([REPLY])
    _retrieve("llm", model)
    assert "Today's date: unknown" in model.calls[0].messages[0].content


def test_each_mode_records_its_policy_in_the_trace_dict() -> None:
    llm = _retrieve("llm", FakeChat([REPLY], name="qwen2.5:7b"), today=TODAY).rewrite
    assert llm.policy == llm_policy("qwen2.5:7b") == f"llm/qwen2.5:7b/prompt-{prompt_digest()}"
    assert llm.to_dict()["policy"] == llm.policy
    assert _retrieve("rules", today=TODAY).rewrite.to_dict()["policy"] == POLICY_VERSION
    assert _retrieve("none").rewrite.to_dict()["policy"] == "none"
    assert _retrieve("last-turn").rewrite.to_dict()["policy"] == "last-turn"


def test_a_failed_llm_rewrite_records_the_rules_policy_that_answered() -> None:
    rewrite = _retrieve("llm", FakeChat([LLMHTTPError(500, "boom")]), today=TODAY).rewrite
    assert rewrite.backend == "rules"
    assert rewrite.policy == POLICY_VERSION
    assert rewrite.error == "llm http 500"


def test_the_prompt_digest_covers_the_prompt_text_and_the_output_schema() -> None:
    text = PROMPT_PATH.read_text(encoding="utf-8") + json.dumps(rewrite_schema(0), sort_keys=True)
    assert prompt_digest() == hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def test_evaluation_rows_record_the_policy() -> None:
    from conversations.quality.datasets import EvalTask
    from conversations.quality.evaluate import task_row

    task = EvalTask(id="t", history=(), question="q", relevant=frozenset({"pt/x"}))
    plan = decide(_retrieve("rules"), "pt")
    row = task_row(task=task, plan=plan, mode="rules", ks=[5], depth=10)
    assert row["policy"] == POLICY_VERSION


def _plans_found(request: SearchRequest) -> list[Hit]:
    """The turn's searches find the health plan's page; the last reply's own words (the
    reply probe: "inclua", "odontologica" ...) find the dental plan's page too."""
    pages = [
        ("saude", "Assistência médica — inclusão de dependentes", "mensalidade do titular"),
        ("odonto", "Assistência odontológica — dependentes", "mensalidade por pessoa"),
    ]
    hits = [
        Hit(i, i, doc, title, "", text, 0, "", i, i, 0.1 / i)
        for i, (doc, title, text) in enumerate(pages, 1)
    ]
    return hits if "odontologica" in request.text else hits[:1]


def test_a_turn_that_only_asks_after_a_reply_naming_two_found_pages_is_asked_back() -> None:
    """The turn's trace and clarification name the pages the last reply named, the one the
    turn's own searches missed included."""
    outcome = asyncio.run(
        retrieve(
            question="quanto custa por mês?",
            history=[
                HistoryMessage("user", "meu filho nasceu ontem, o que eu preciso fazer?"),
                HistoryMessage(
                    "assistant",
                    "Inclua-o como dependente na assistência médica e na assistência "
                    "odontológica em até 30 dias.",
                ),
            ],
            glossary=[],
            scope=Scope(collection_id=1),
            engine=FakeSearcher(_plans_found),
            embedder=None,
            lexicon=lambda words: LexiconView(),
            settings=RetrievalSettings(mode="rules"),
        )
    )
    rewrite = outcome.rewrite
    assert rewrite.needs_clarification and rewrite.clarify_reason == "siblings"
    assert rewrite.clarification is not None
    assert rewrite.clarification.options == (
        "Assistência médica — inclusão de dependentes",
        "Assistência odontológica — dependentes",
    )
    assert any("the last reply named" in note for note in rewrite.notes)


def test_the_users_own_words_are_searched_only_where_they_can_count() -> None:
    """The safety-net query (the user's words as typed) is left out where it can only cost
    an embedding and a search: beside a follow-up read with its topic only (the evidence
    never keeps it there), and beside a query that is those words with the glossary's
    expansions added. A spelling fix or a second reading keeps it."""
    weights = {"original": 0.5}

    def searched(*queries: SearchQuery, original: str) -> list[str]:
        rewrite = RewriteResult(queries=list(queries), backend="rules")
        return [q.type for q in search_queries(rewrite, original, weights)]

    contextual = SearchQuery("plano de saúde para quem é PJ", "expand", reading="contextual")
    assert searched(contextual, original="e para quem é PJ?") == ["expand"]
    standalone = SearchQuery("para quem é PJ", "normalize", reading="standalone")
    assert searched(contextual, standalone, original="e para quem é PJ?") == [
        "expand",
        "normalize",
        "original",
    ]
    expanded = SearchQuery("a PLR (participação nos lucros) paga quando?", "expand")
    assert searched(expanded, original="a PLR paga quando?") == ["expand"]
    corrected = SearchQuery("como peço reembolso", "normalize")
    assert searched(corrected, original="como pesso reenbolso") == ["normalize", "original"]


def test_the_rules_policy_is_a_hash_of_their_sources(tmp_path: Path) -> None:
    from retrieval.pipeline.rewrite_rules import POLICY_SOURCES, policy_version

    assert any(p.name == "cues.py" for p in POLICY_SOURCES)  # the rules' word lists
    rules, words = tmp_path / "core.py", tmp_path / "words.py"
    rules.write_text("THRESHOLD = 3\n")
    words.write_text("CUES = {'e'}\n")
    before = policy_version((rules, words))
    assert before.startswith("rules-") and before == policy_version((rules, words))
    words.write_text("CUES = {'e', 'y'}\n")
    assert policy_version((rules, words)) != before


def test_the_trace_lists_the_rules_that_fired_by_id() -> None:
    outcome = asyncio.run(
        retrieve(
            question="e para PJ?",
            history=[
                HistoryMessage("user", "como funciona o reembolso de despesas de viagem?"),
                HistoryMessage("assistant", "Pelo portal, em até 30 dias."),
            ],
            glossary=[GlossaryEntry("PJ", "pessoa jurídica")],
            scope=Scope(collection_id=1),
            engine=NothingFound(),
            embedder=None,
            lexicon=lambda words: LexiconView(),
            settings=RetrievalSettings(mode="rules"),
            language="pt",
        )
    )
    rules = outcome.rewrite.to_dict()["rules"]
    assert isinstance(rules, list)
    ids = [rule["id"] for rule in rules]
    assert "glossary" in ids and "carry_topic" in ids
    # Each rule's detail is the trace's note, in the same order.
    assert [rule["detail"] for rule in rules] == outcome.rewrite.notes
