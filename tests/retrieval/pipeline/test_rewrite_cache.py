"""The rewrite cache: keyed by everything that decides a rewrite, never a wrong reader's.

Pure: `retrieve` runs with a search engine that finds nothing, a dict as the store and a
scripted chat model; the app's store (Django's cache) is exercised by the turn tests.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import date
from typing import Any

from retrieval.pipeline.llm import LLMHTTPError
from retrieval.pipeline.retrieve import RetrievalOutcome, RetrievalSettings, RewriteMode, retrieve
from retrieval.pipeline.rewrite_cache import cache_key, from_state, to_state
from retrieval.pipeline.rewrite_llm import llm_policy
from retrieval.pipeline.rewrite_rules import POLICY_VERSION
from retrieval.pipeline.search import Scope
from retrieval.pipeline.types import GlossaryEntry, HistoryMessage, LexiconView, RewriteInput
from tests.fakes import FakeChat
from tests.retrieval.pipeline.test_rewrite_policy import NothingFound

TODAY = date(2026, 12, 1)
HISTORY = [
    HistoryMessage("user", "como funciona o reembolso de despesas?"),
    HistoryMessage("assistant", "Pelo portal, em até 30 dias."),
]
REPLY = json.dumps(
    {
        "queries": [{"text": "reembolso de despesas PJ", "type": "expand", "area": None}],
        "needs_clarification": False,
        "clarification": None,
    }
)


class DictCache:
    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}
        self.gets = 0

    def get(self, key: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.data.get(key)

    def set(self, key: str, value: dict[str, Any]) -> None:
        json.dumps(value)  # what is kept must survive any store
        self.data[key] = value


class BrokenCache:
    def get(self, key: str) -> dict[str, Any] | None:
        raise ConnectionError("cache down")

    def set(self, key: str, value: dict[str, Any]) -> None:
        raise ConnectionError("cache down")


def _model(replies: int = 4, name: str = "qwen2.5:7b") -> FakeChat:
    return FakeChat([REPLY] * replies, name=name)


def _retrieve(
    cache: Any,
    mode: RewriteMode = "llm",
    model: FakeChat | None = None,
    scope: Scope | None = None,
    question: str = "e para PJ?",
) -> RetrievalOutcome:
    return asyncio.run(
        retrieve(
            question=question,
            history=HISTORY,
            glossary=[GlossaryEntry("PJ", "pessoa jurídica")],
            scope=scope or Scope(collection_id=1, group_ids=(3,)),
            engine=NothingFound(),
            embedder=None,
            lexicon=lambda words: LexiconView(),
            settings=RetrievalSettings(mode=mode),
            model=model or (_model() if mode == "llm" else None),
            today=TODAY,
            rewrite_cache=cache,
        )
    )


def test_the_same_turn_is_rewritten_once_and_then_served_from_the_cache() -> None:
    cache = DictCache()
    model = _model(replies=1)  # a second request to the model would fail the test
    first = _retrieve(cache, model=model)
    assert first.rewrite.cache == "miss" and len(cache.data) == 1
    second = _retrieve(cache, model=model)
    assert second.rewrite.cache == "hit" and len(model.calls) == 1
    assert [q.text for q in second.queries] == [q.text for q in first.queries]
    assert second.rewrite.policy == llm_policy("qwen2.5:7b")
    assert any(n.startswith("rewrite cache: hit (saved ") for n in second.rewrite.notes)
    assert second.rewrite.to_dict()["cache"] == "hit"


def test_another_readers_permissions_or_question_never_share_a_rewrite() -> None:
    cache = DictCache()
    _retrieve(cache)
    other_groups = _retrieve(cache, scope=Scope(collection_id=1, group_ids=(3, 4)))
    other_question = _retrieve(cache, question="e para CLT?")
    assert other_groups.rewrite.cache == other_question.rewrite.cache == "miss"
    assert len(cache.data) == 3


def test_the_key_changes_with_policy_model_glossary_window_language_and_date() -> None:
    inp = RewriteInput("e para PJ?", tuple(HISTORY), (GlossaryEntry("PJ", "pessoa jurídica"),))
    scope = Scope(collection_id=1)

    def key(i: RewriteInput = inp, s: Scope = scope, **who: Any) -> str:
        return cache_key(i, scope=s, **{"policy": "p1", "backend": "rules", "model": None, **who})

    base = key()
    assert base == key()
    variants = [
        key(policy="p2"),
        key(backend="llm", model="qwen"),
        key(replace(inp, glossary=())),
        key(replace(inp, history=())),
        key(replace(inp, language="es")),
        key(replace(inp, today=TODAY)),
        key(s=Scope(2)),
        key(s=Scope(1, see_everything=True)),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_a_kept_rewrite_comes_back_whole() -> None:
    rewrite = _retrieve(None, "rules").rewrite
    again, computed = from_state(json.loads(json.dumps(to_state(rewrite, 4.2))))
    assert again == rewrite and computed == 4.2
    assert again is not rewrite


def test_a_rewrite_is_kept_per_model_a_failed_one_is_not_and_the_rules_never_are() -> None:
    cache = DictCache()
    assert _retrieve(cache, model=_model(name="a")).rewrite.cache == "miss"
    assert _retrieve(cache, model=_model(name="b")).rewrite.cache == "miss"
    assert len(cache.data) == 2
    rules = _retrieve(cache, "rules")
    assert rules.rewrite.cache is None and rules.rewrite.policy == POLICY_VERSION
    assert len(cache.data) == 2
    failing = FakeChat([LLMHTTPError(500, "boom")], name="other-model")
    fell_back = _retrieve(cache, model=failing).rewrite
    assert fell_back.error == "llm http 500" and len(cache.data) == 2


def test_a_cache_that_is_down_costs_nothing_but_a_note() -> None:
    outcome = _retrieve(BrokenCache())
    assert outcome.queries and outcome.rewrite.cache is None
    assert "rewrite cache unavailable: ConnectionError" in outcome.errors
