"""Evaluation: the whole task format is read, and terms, facts and decisions are scored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conversations.quality.datasets import EvalTask, EvaluationInputError, task_from_record
from conversations.quality.evaluate import references_by_task
from conversations.quality.scoring import (
    answer_scores,
    clarification_scores,
    contains,
    fact_checks,
    first_words,
    match_norm,
    no_search_scores,
    not_found_table,
    not_found_threshold,
    term_checks,
    term_scores,
    token_recall,
    word_count,
)
from retrieval.pipeline.types import HistoryMessage


def test_task_reads_every_field_of_the_ptes_format() -> None:
    task = task_from_record(
        {
            "id": "d-001",
            "category": "referencia",
            "lang": "pt",
            "history": [{"role": "user", "text": "oi"}, {"role": "assistant", "text": "olá"}],
            "question": "comecei em maio, ganho também?",
            "relevant": ["p-017"],
            "expect_clarification": False,
            "expected_queries_contain": ["participação nos lucros", "maio"],
            "queries_must_not_contain": ["CPF"],
            "ambiguous_between": [],
            "expect_no_search": False,
            "expected_answer_contains": ["8/12 do valor"],
        }
    )
    assert task.expected_queries_contain == ("participação nos lucros", "maio")
    assert task.queries_must_not_contain == ("CPF",)
    assert task.expected_answer_contains == ("8/12 do valor",)
    assert not task.expect_no_search and task.language == "pt"


def test_task_reads_mtrag_uns_expect_no_answer() -> None:
    assert task_from_record({"question": "q", "expect_no_answer": True}).expect_no_answer
    assert not task_from_record({"question": "q"}).expect_no_answer


def test_history_may_be_plain_strings_alternating_from_the_user() -> None:
    task = task_from_record({"question": "e pro PJ?", "history": ["como peço?", "No portal."]})
    assert task.history == (
        HistoryMessage("user", "como peço?"),
        HistoryMessage("assistant", "No portal."),
    )


def test_a_term_list_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(EvaluationInputError):
        task_from_record({"question": "x", "expected_answer_contains": "not a list"})


def test_matching_ignores_case_accents_and_hyphens() -> None:
    assert match_norm("Vale-Alimentação  hoje") == "vale alimentacao hoje"
    assert contains("o Vale alimentacao é pago", "vale-alimentação")
    checks = term_checks(
        ["participacao nos lucros maio", "outra"], ["participação nos lucros"], ["CPF"]
    )
    assert checks == {"expected": {"participação nos lucros": True}, "forbidden": {"CPF": False}}


def test_facts_and_token_recall() -> None:
    assert fact_checks("Recebe 8/12 do VALOR, não há carência.", ["8/12 do valor", "12 dias"]) == {
        "8/12 do valor": True,
        "12 dias": False,
    }
    assert token_recall("The Cardinals played in London", "They played in London") == 2 / 3


def _row(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "clarified": False,
        "expect_clarification": False,
        "expect_no_search": False,
        "searched": True,
        "relevant": ["d"],
        "terms": {"expected": {}, "forbidden": {}},
    }
    return base | fields


def test_clarification_and_no_search_figures() -> None:
    rows = [
        _row(clarified=True, expect_clarification=True, relevant=[]),
        _row(clarified=True),  # asked back without need
        _row(expect_no_search=True, searched=False, relevant=[]),
        _row(expect_no_search=True, relevant=[]),  # small talk searched
        _row(searched=False),  # a searchable turn skipped
    ]
    clar = clarification_scores(rows)
    assert (clar["precision"], clar["recall"]) == (0.5, 1.0)
    ns = no_search_scores(rows)
    assert (ns["accuracy"], ns["small_talk_searched"], ns["false_no_search"]) == (0.5, 1, 1)


def test_term_pass_rates_per_term_and_per_task() -> None:
    rows = [
        _row(terms={"expected": {"a": True, "b": False}, "forbidden": {"x": True}}),
        _row(terms={"expected": {"c": True}, "forbidden": {}}),
    ]
    scores = term_scores(rows)
    assert scores["expected"]["term_pass"] == 2 / 3
    assert scores["expected"]["task_pass"] == 0.5
    assert scores["forbidden"]["task_pass"] == 0.0


def test_answer_scores_fact_and_task_level() -> None:
    rows = [
        _row(answer={"text": "a b", "words": 2, "facts": {"f": True, "g": False}, "build_ms": 1}),
        _row(answer={"text": "c d e", "words": 3, "facts": {"h": True}, "build_ms": 3}),
        _row(answer={"text": "x", "words": 1, "facts": {}, "build_ms": 2}),  # not annotated
    ]
    scores = answer_scores(rows)
    assert (scores["n"], scores["facts"]) == (2, 3)
    assert scores["fact_recall"] == 2 / 3
    assert scores["task_pass"] == 0.5
    assert scores["median_words"] == 2


def test_mtrag_reference_is_the_next_turns_assistant_message() -> None:
    first = EvalTask("c<::>1", (), "who?", frozenset({"p"}))
    second = EvalTask(
        "c<::>2",
        (HistoryMessage("user", "who?"), HistoryMessage("assistant", "The Cardinals.")),
        "where?",
        frozenset({"q"}),
    )
    assert references_by_task([first, second]) == {"c<::>1": "The Cardinals."}


def test_first_words_cuts_after_the_nth_word_as_counted() -> None:
    text = "O aviso é de 30 dias [1]. Depois, 1.500,00 reais."
    assert first_words(text, 5) == "O aviso é de 30"
    assert word_count(first_words(text, 7)) == 7
    assert first_words(text, 99) == text


def _answer_with(facts: dict[str, bool], at: dict[str, dict[str, bool]], **more: Any) -> Any:
    ceiling = more.pop("ceiling", {"1": facts, "3": facts})
    return _row(
        answer={
            "text": "t",
            "words": 1,
            "facts": facts,
            "facts_at": at,
            "ceiling": ceiling,
            "build_ms": 1,
            **more,
        }
    )


def test_answer_scores_fact_recall_at_word_limits_and_the_ceiling() -> None:
    rows = [
        _answer_with(
            {"f": True, "g": True},
            {"40": {"f": True, "g": False}, "80": {"f": True, "g": True}},
            ceiling={"1": {"f": True, "g": True}, "3": {"f": True, "g": True}},
        ),
        _answer_with(
            {"h": False},
            {"40": {"h": False}, "80": {"h": False}},
            ceiling={"1": {"h": False}, "3": {"h": True}},
        ),
    ]
    scores = answer_scores(rows)
    assert scores["facts_at_40"] == 1 / 3
    assert scores["facts_at_80"] == 2 / 3
    assert scores["facts_at_120"] is None  # not measured in these rows
    assert (scores["ceiling_1"], scores["ceiling_3"]) == (2 / 3, 1.0)


def test_not_found_precision_recall_and_facts_at_risk() -> None:
    no = {"40": {}}
    rows = [
        _answer_with({}, no, not_found=True, expect_no_answer=True),
        _answer_with({}, no, not_found=False, expect_no_answer=True),
        _answer_with({"a": False, "b": False}, no, not_found=True, expect_no_answer=False),
        _answer_with({"c": True, "d": True}, no, not_found=False, expect_no_answer=False),
    ]
    nf = answer_scores(rows)["not_found"]
    assert (nf["said"], nf["expected"]) == (2, 2)
    assert (nf["precision"], nf["recall"]) == (0.5, 0.5)
    assert nf["refused_answerable"] == 1
    assert nf["fact_recall_at_risk"] == 0.5


def test_not_found_without_expectations_reports_no_precision() -> None:
    nf = answer_scores([_answer_with({"a": True}, {}, not_found=False)])["not_found"]
    assert "precision" not in nf and nf["said"] == 0


def _covered(coverage: float, facts: int = 0) -> dict[str, Any]:
    return {"coverage": coverage, "facts": {f"f{i}": True for i in range(facts)}}


def test_not_found_calibration_takes_the_largest_threshold_refusing_no_answerable_turn() -> None:
    answerable = [_covered(0.12, facts=1), _covered(0.5, facts=3)]
    unanswerable = [_covered(0.0), _covered(0.06), _covered(0.11), _covered(0.4)]
    table = not_found_table(answerable, unanswerable, [0.05, 0.1, 0.15])
    assert [r["recall"] for r in table] == [0.25, 0.5, 0.75]
    assert [r["refused_answerable"] for r in table] == [0, 0, 1]
    assert table[2]["facts_at_risk"] == 0.25 and table[2]["precision"] == 0.75
    assert not_found_threshold(table) == 0.1
    assert not_found_threshold(table, facts_budget=0.25) == 0.15
    # Refusals must also be right often enough: .15's are right 3 times in 4.
    assert not_found_threshold(table, facts_budget=0.25, min_precision=0.8) == 0.1


def test_the_calibration_script_prints_the_table_and_the_threshold(tmp_path: Path) -> None:
    def report(name: str, answers: list[dict[str, Any]]) -> str:
        path = tmp_path / name
        rows = [{"answer": a} for a in answers] + [{"answer": None}]
        path.write_text(json.dumps({"tasks": rows}), encoding="utf-8")
        return str(path)

    good = report("good.json", [_covered(0.11, facts=1), _covered(0.5, facts=2)])
    bad = report("bad.json", [_covered(0.0), _covered(0.07)])
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [sys.executable, "scripts/calibrate_not_found.py", "--answerable", good]
        + ["--unanswerable", bad],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "answerable 2, unanswerable 2" in proc.stdout
    assert proc.stdout.rstrip().endswith("NOT_FOUND_COVERAGE = 0.10")
