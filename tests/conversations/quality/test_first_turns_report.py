"""The evaluation's first-turn figures: turns with nothing before them, and how each mode's
compare with the no-rewrite mode's (issue 36: identical unless a rule is named)."""

from __future__ import annotations

from conversations.quality.datasets import EvalTask
from conversations.quality.evaluate import ModeReport, first_turns_against, task_row
from conversations.quality.management.commands.evaluate import first_turn_lines
from retrieval.pipeline.retrieve import RewriteMode
from retrieval.pipeline.types import HistoryMessage
from tests.retrieval.pipeline.test_first_turns import _plan

TASKS = [
    EvalTask("t-1", (), "quantos dias de férias eu tenho por ano?", frozenset({"ferias"})),
    EvalTask("t-2", (), "qual o prazo do reembolzo de viagem?", frozenset({"reembolso"})),
    EvalTask(
        "t-3",
        (
            HistoryMessage("user", "como incluir dependentes no plano de saúde?"),
            HistoryMessage("assistant", "Pelo portal, com a certidão."),
        ),
        "e quanto custa?",
        frozenset({"saude"}),
    ),
]


def _report(mode: RewriteMode) -> ModeReport:
    report = ModeReport(mode=mode, ks=[5])
    for task in TASKS:
        plan, _ = _plan(task.question, mode, task.history)
        row = task_row(task=task, plan=plan, mode=mode, ks=[5], depth=10)
        report.add({**row, "language": plan.language}, {})
    return report


def test_the_report_scores_the_turns_with_nothing_before_them_apart() -> None:
    summary = _report("rules").summary()
    assert summary["overall"]["n"] == 3
    assert summary["first_turns"]["n"] == 2
    assert summary["first_turns"]["recall@5"] == 1.0


def test_first_turns_differ_from_none_only_where_a_rule_is_named() -> None:
    none, rules = _report("none"), _report("rules")
    compared = first_turns_against(none, rules, [5])
    # The plain question is searched as none searches it; the typo's fix is named.
    assert (compared["n"], compared["identical"], compared["named"]) == (2, 1, 1)
    assert compared["unnamed"] == []
    assert set(compared["by_rule"]) == {"spelling"}
    assert compared["by_rule"]["spelling"]["changed"] == 1
    assert "spelling" in next(r for r in rules.rows if r["id"] == "t-2")["rules"]
    # A first turn ranked otherwise with no rule named is listed.
    row = next(r for r in rules.rows if r["id"] == "t-1")
    row["ranked"] = list(reversed(row["ranked"])) + ["other"]
    assert first_turns_against(none, rules, [5])["unnamed"] == ["t-1"]


def test_the_command_prints_the_first_turns_against_none() -> None:
    reports = {"none": _report("none"), "rules": _report("rules")}
    lines = first_turn_lines(reports, [5])
    assert lines[0].startswith("rules: first turns against none: 1 of 2 identical, 1 changed")
    assert lines[0].count("0 changed unnamed") == 1
    assert "spelling: changed 1" in lines[1]
