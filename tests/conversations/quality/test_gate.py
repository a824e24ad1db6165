"""The promotion gate's decision (pure): hand-built per-task results of two policies."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from conversations.quality.gate import (
    GateConfig,
    GateReport,
    TaskResult,
    TurnResult,
    gate_report,
    length_band,
    question_words,
    report_text,
)

CONFIG = GateConfig(metric="mrr@10", margin=0.05, latency_budget_ms=100, degradation_ceiling=0.25)


def task(
    id: str,
    mrr: float,
    *,
    category: str = "standalone",
    language: str = "pt",
    words: int = 6,
    relevant: Sequence[str] = ("doc-a",),
    sources: Sequence[str] = (),
    recall: float | None = None,
    facts: dict[str, bool] | None = None,
    rewrite_ms: float = 10.0,
    model_calls: int = 0,
    fell_back: bool = False,
) -> TaskResult:
    r = (1.0 if mrr > 0 else 0.0) if recall is None else recall
    return TaskResult(
        id=id,
        category=category,
        language=language,
        words=words,
        relevant=frozenset(relevant),
        metrics={"recall@5": r, "recall@10": r, "mrr@10": mrr, "ndcg@10": mrr},
        sources=tuple(sources),
        facts=facts,
        rewrite_ms=rewrite_ms,
        total_ms=rewrite_ms + 50,
        model_calls=model_calls,
        fell_back=fell_back,
    )


def decide(
    current: Sequence[TaskResult],
    candidate: Sequence[TaskResult],
    config: GateConfig = CONFIG,
    **turns: Sequence[TurnResult],
) -> GateReport:
    return gate_report(
        current_policy="last-turn",
        candidate_policy="rules-x",
        current=current,
        candidate=candidate,
        config=config,
        **turns,
    )


def criteria(report: GateReport) -> dict[str, bool]:
    return {c.name: c.passed for c in report.criteria}


def test_a_candidate_that_wins_by_the_margin_passes() -> None:
    current = [task("t1", 0.5), task("t2", 0.5), task("t3", 1.0), task("t4", 0.0)]
    candidate = [task("t1", 1.0), task("t2", 1.0), task("t3", 1.0), task("t4", 0.0)]
    report = decide(current, candidate)
    overall = report.groups[0]
    assert (overall.kind, overall.n) == ("overall", 4)
    assert overall.current["mrr@10"] == pytest.approx(0.5)
    assert overall.candidate["mrr@10"] == pytest.approx(0.75)
    assert overall.delta["mrr@10"] == pytest.approx(0.25)
    assert report.better_tasks == ["t1", "t2"] and report.worse_tasks == []
    assert report.improvement_rate == pytest.approx(0.5)
    assert report.degradation_rate == 0.0
    assert criteria(report) == {
        "judged tasks": True,
        "margin": True,
        "latency": True,
        "degradation": True,
    }
    assert report.passed


def test_a_candidate_that_wins_by_less_than_the_margin_fails_on_the_margin_alone() -> None:
    current = [task(f"t{i}", 0.5) for i in range(10)]
    candidate = [task("t0", 0.7)] + [task(f"t{i}", 0.5) for i in range(1, 10)]  # +0.02 overall
    report = decide(current, candidate)
    assert report.groups[0].delta["mrr@10"] == pytest.approx(0.02)
    assert criteria(report) == {
        "judged tasks": True,
        "margin": False,
        "latency": True,
        "degradation": True,
    }
    assert not report.passed
    # The same result passes a smaller margin: the margin is the setting, not a constant.
    looser = GateConfig(metric="mrr@10", margin=0.02, latency_budget_ms=100)
    assert decide(current, candidate, looser).passed


def test_a_candidate_over_the_latency_budget_fails_though_it_wins() -> None:
    current = [task("t1", 0.5, rewrite_ms=5), task("t2", 0.5, rewrite_ms=5)]
    candidate = [task("t1", 1.0, rewrite_ms=40), task("t2", 1.0, rewrite_ms=400)]
    report = decide(current, candidate)
    assert report.candidate.rewrite_p95_ms == pytest.approx(40 + 0.95 * 360)
    assert report.current.rewrite_p95_ms == pytest.approx(5)
    assert criteria(report)["latency"] is False
    assert criteria(report)["margin"] is True
    assert not report.passed


def test_real_turns_count_in_the_latency_but_not_in_the_metrics() -> None:
    current = [task("t1", 0.5), task("t2", 0.5)]
    candidate = [task("t1", 1.0, rewrite_ms=20), task("t2", 1.0, rewrite_ms=20)]
    slow = TurnResult("9", ("q",), ("doc-a",), "searched", rewrite_ms=5000, model_calls=1)
    fast = TurnResult("9", ("q",), ("doc-a",), "searched", rewrite_ms=3)
    report = decide(current, candidate, current_turns=[fast], candidate_turns=[slow])
    assert report.candidate.turns_timed == 3
    assert report.candidate.model_calls == 1 and report.current.model_calls == 0
    assert criteria(report)["latency"] is False
    assert report.groups[0].n == 2


def test_a_candidate_over_the_degradation_ceiling_fails_though_it_wins_on_average() -> None:
    # Two tasks much better, two a little worse: the mean rises, half the tasks got worse.
    current = [task("t1", 0.0), task("t2", 0.0), task("t3", 1.0), task("t4", 1.0)]
    candidate = [task("t1", 1.0), task("t2", 1.0), task("t3", 0.5), task("t4", 0.5)]
    report = decide(current, candidate)
    assert report.groups[0].delta["mrr@10"] == pytest.approx(0.25)
    assert report.worse_tasks == ["t3", "t4"] and report.degradation_rate == pytest.approx(0.5)
    # Each changed task with both values, worst first.
    assert [(c.id, c.current, c.candidate) for c in report.changes] == [
        ("t3", 1.0, 0.5),
        ("t4", 1.0, 0.5),
        ("t1", 0.0, 1.0),
        ("t2", 0.0, 1.0),
    ]
    assert criteria(report)["degradation"] is False and criteria(report)["margin"] is True
    assert not report.passed
    # Unjudged tasks (a clarification expected, no documents) are in no rate.
    clarify = task("c1", 0.0, relevant=(), category="clarification")
    report = decide([*current, clarify], [*candidate, clarify])
    assert report.judged == 4 and report.tasks == 5
    assert report.degradation_rate == pytest.approx(0.5)


def test_breakdown_by_category_language_and_question_length() -> None:
    current = [
        task("s1", 1.0, category="standalone", language="pt", words=3),
        task("s2", 0.5, category="standalone", language="es", words=12),
        task("f1", 0.0, category="follow-up", language="pt", words=3),
        task("f2", 0.5, category="follow-up", language="pt", words=7),
    ]
    candidate = [
        task("s1", 1.0, category="standalone", language="pt", words=3),
        task("s2", 0.25, category="standalone", language="es", words=12),
        task("f1", 1.0, category="follow-up", language="pt", words=3),
        task("f2", 1.0, category="follow-up", language="pt", words=7),
    ]
    report = decide(current, candidate)
    rows = {(r.kind, r.group): r for r in report.groups}
    assert list(rows) == [
        ("overall", "overall"),
        ("category", "follow-up"),
        ("category", "standalone"),
        ("language", "es"),
        ("language", "pt"),
        ("length", "short"),
        ("length", "medium"),
        ("length", "long"),
    ]
    follow = rows[("category", "follow-up")]
    assert (follow.n, follow.better, follow.worse) == (2, 2, 0)
    assert follow.current["mrr@10"] == pytest.approx(0.25)
    assert follow.candidate["mrr@10"] == pytest.approx(1.0)
    standalone = rows[("category", "standalone")]
    assert (standalone.worse, standalone.delta["mrr@10"]) == (1, pytest.approx(-0.125))
    assert rows[("language", "es")].n == 1 and rows[("language", "pt")].n == 3
    assert rows[("length", "short")].n == 2
    assert rows[("length", "long")].candidate["mrr@10"] == pytest.approx(0.25)
    assert [length_band(w) for w in (1, 4, 5, 9, 10)] == [
        "short",
        "short",
        "medium",
        "medium",
        "long",
    ]
    assert question_words("regra do VR no home?") == 5


def test_source_coverage_counts_a_multi_topic_turns_topics_with_a_source() -> None:
    topics = ("ferias", "demissao", "plr")
    current = [
        task("m1", 1.0, category="multi-topic", relevant=topics, sources=("ferias", "ferias")),
        task("m2", 1.0, category="multi-topic", relevant=topics[:2], sources=("ferias", "x")),
        task("s1", 1.0, relevant=("y",), sources=()),  # not multi-topic: not counted
    ]
    candidate = [
        task("m1", 1.0, category="multi-topic", relevant=topics, sources=("ferias", "plr", "z")),
        task("m2", 1.0, category="multi-topic", relevant=topics[:2], sources=topics[:2]),
        task("s1", 1.0, relevant=("y",), sources=()),
    ]
    report = decide(current, candidate)
    assert report.current.multi_topic_tasks == 2
    assert report.current.source_coverage == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert report.candidate.source_coverage == pytest.approx((2 / 3 + 1) / 2)
    # Without multi-topic tasks there is no coverage to report (not a zero).
    plain = decide([task("s1", 1.0)], [task("s1", 1.0)])
    assert plain.current.source_coverage is None and plain.current.multi_topic_tasks == 0


def test_answer_facts_cost_and_fallbacks_per_policy() -> None:
    current = [task("t1", 1.0, facts={"30 dias": True, "nota fiscal": False})]
    candidate = [
        task("t1", 1.0, facts={"30 dias": True, "nota fiscal": True}, model_calls=1, fell_back=True)
    ]
    report = decide(current, candidate)
    assert (report.current.fact_recall, report.current.facts) == (0.5, 2)
    assert report.candidate.fact_recall == 1.0
    assert (report.candidate.model_calls, report.candidate.fell_back) == (1, 1)
    assert report.candidate.tokens is None  # the clients report none: not 0
    assert decide([task("t1", 1.0)], [task("t1", 1.0)]).current.fact_recall is None


def test_real_turns_report_changes_and_source_overlap_not_recall() -> None:
    current = [
        TurnResult("1", ("vr",), ("a", "b"), "searched"),
        TurnResult("2", ("ferias",), ("c",), "searched"),
        TurnResult("3", (), (), "no search"),
        TurnResult("4", ("x",), ("d",), "searched"),
    ]
    candidate = [
        TurnResult("1", ("vale-refeição",), ("a", "c"), "searched"),
        TurnResult("2", ("ferias",), ("c",), "searched"),
        TurnResult("3", (), (), "no search"),
        TurnResult("4", ("x y",), (), "asked back"),
    ]
    tasks = [task("t1", 1.0)]
    real = decide(tasks, tasks, current_turns=current, candidate_turns=candidate).real_turns
    assert real is not None
    assert real.n == 4
    assert real.queries_changed == pytest.approx(0.5)
    assert real.decision_changed == pytest.approx(0.25)
    assert real.compared == 2  # turns 1 and 2 show sources with both policies
    assert real.first_source_same == pytest.approx(1.0)
    assert real.source_overlap == pytest.approx((1 / 3 + 1) / 2)
    assert real.changed_turns == ["1", "4"]
    assert decide(tasks, tasks).real_turns is None


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="same tasks"):
        decide([task("t1", 1.0)], [task("t2", 1.0)])
    with pytest.raises(ValueError, match="unique"):
        decide([task("t1", 1.0), task("t1", 0.5)], [task("t1", 1.0), task("t1", 0.5)])
    with pytest.raises(ValueError, match="metric"):
        GateConfig(metric="precision")
    with pytest.raises(ValueError, match="ceiling"):
        GateConfig(degradation_ceiling=1.5)
    with pytest.raises(ValueError, match="margin"):
        GateConfig(margin=-0.1)
    # No judged task: nothing to win on, so no promotion.
    empty = decide([task("c", 0.0, relevant=())], [task("c", 0.0, relevant=())])
    assert criteria(empty)["judged tasks"] is False and not empty.passed


def test_the_report_as_text_shows_every_figure_and_the_verdict() -> None:
    current = [task("t1", 0.5, category="follow-up"), task("t2", 1.0, language="es")]
    candidate = [task("t1", 1.0, category="follow-up"), task("t2", 1.0, language="es")]
    text = report_text(decide(current, candidate).to_dict())
    assert "candidate rules-x vs current last-turn" in text
    assert "category: follow-up" in text and "language: es" in text
    assert "length: medium" in text
    assert "0.500→1.000" in text
    assert "verdict: PASS" in text and "[pass] margin: mrr@10 0.750 → 1.000" in text
    failing = report_text(decide(candidate, current).to_dict())
    assert "verdict: FAIL" in failing and "[FAIL] degradation" in failing
    assert "1 worse: t1 follow-up 1.000→0.500" in failing
