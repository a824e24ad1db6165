"""One tuning value holds the decisions' thresholds; a turn decides with its request's."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from retrieval.pipeline.fusion import Hit
from retrieval.pipeline.plan import TurnBackends, TurnPlan, TurnRequest, plan_turn
from retrieval.pipeline.retrieve import RetrievalSettings
from retrieval.pipeline.rewrite_rules import POLICY_VERSION
from retrieval.pipeline.search import Scope, SearchRequest
from retrieval.pipeline.tuning import (
    DEFAULT_TUNING,
    Tuning,
    TuningError,
    tuning,
    tuning_from_json,
)
from retrieval.pipeline.types import LexiconView
from tests.fakes import FakeSearcher

PAGES = ("Férias", "Licença-maternidade", "Vale-refeição", "Plano de saúde")


def _pages(request: SearchRequest) -> list[Hit]:
    return [
        Hit(i, i, f"p{i}", title, "", f"{title} texto", 0, "", i, i, 0.1 / i)
        for i, title in enumerate(PAGES, 1)
    ]


def _plan(value: Tuning) -> TurnPlan:
    request = TurnRequest(
        question="e isso?",  # points back at nothing: asked back, naming the pages found
        history=(),
        scope=Scope(collection_id=1),
        glossary=(),
        settings=RetrievalSettings(mode="rules"),
        language="pt",
        default_language="pt",
        tuning=value,
    )
    backends = TurnBackends(
        searcher=FakeSearcher(_pages), embedder=None, lexicon=lambda w: LexiconView()
    )
    return asyncio.run(plan_turn(request, backends))


def test_a_turn_decides_with_its_requests_tuning_and_names_it_in_the_policy() -> None:
    default = _plan(DEFAULT_TUNING)
    assert default.kind == "ask_back" and default.options == PAGES[:3]
    assert default.outcome.rewrite.policy == POLICY_VERSION
    fewer = _plan(dataclasses.replace(DEFAULT_TUNING, pointer_options=2))
    assert fewer.kind == "ask_back" and fewer.options == PAGES[:2]
    policy = fewer.outcome.rewrite.policy or ""
    assert policy.startswith(POLICY_VERSION + "+tuning-")
    assert tuning() == DEFAULT_TUNING  # the turn's tuning ended with the turn


def test_a_tuning_file_changes_only_the_fields_it_names() -> None:
    value = tuning_from_json('{"strong": 0.5, "neighbourhood": 4}')
    assert (value.strong, value.neighbourhood) == (0.5, 4)
    assert dataclasses.replace(value, strong=0.45, neighbourhood=5) == DEFAULT_TUNING
    assert value.digest() != DEFAULT_TUNING.digest()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[1]", "give a JSON object"),
        ("{nope", "not JSON"),
        ('{"strongest": 1}', "unknown field(s) strongest"),
        ('{"neighbourhood": 4.5}', "neighbourhood must be a whole number"),
        ('{"strong": true}', "strong must be a number"),
        ('{"strong": -0.1}', "strong must be a number of at least 0"),
    ],
)
def test_a_bad_tuning_file_says_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(TuningError, match=error.replace("(", r"\(").replace(")", r"\)")):
        tuning_from_json(text)


@pytest.mark.django_db
def test_evaluate_refuses_a_bad_tuning_file_before_reading_the_corpus(tmp_path: Path) -> None:
    bad = tmp_path / "tuning.json"
    bad.write_text('{"strongest": 1}')
    with pytest.raises(CommandError, match="unknown field"):
        call_command(
            "evaluate",
            corpus=tmp_path / "missing.jsonl",
            tasks=tmp_path / "missing.jsonl",
            tuning=bad,
            quiet=True,
        )
