"""The promotion gate (pure): a candidate rewrite policy against the current one, task by task.

Both policies ran in shadow on the same judged tasks, and on the same sample of real turns
(unjudged); this module compares what each did and decides whether the candidate may be
promoted. It must

- win on the primary metric (mean over the judged tasks) by at least the configured margin,
- keep its rewrite p95 (over every replayed turn, judged or real) within the latency budget,
- make at most the ceiling's share of judged tasks worse (per task, on the primary metric).

No Django and no I/O: `conversations.quality.promotion` runs the policies, feeds this module
and stores the report (`GateReport.to_dict()`, rendered by `report_text` and the admin).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from retrieval.pipeline.metrics import percentile

METRICS: tuple[str, ...] = ("recall@5", "recall@10", "mrr@10", "ndcg@10")
# The category whose judged documents are the turn's topics (`EvalCase.Category`).
MULTI_TOPIC = "multi-topic"
# Question length by words: telegraphic ("regra do VR no home") is short.
SHORT_MAX_WORDS = 4
MEDIUM_MAX_WORDS = 9
LENGTHS = ("short", "medium", "long")
# Per-task metric differences below this are ties (floating point of equal rankings).
EPSILON = 1e-9
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class GateConfig:
    """What a candidate must achieve: the settings' `CHATRAG_GATE_*`."""

    metric: str = "mrr@10"
    margin: float = 0.01
    latency_budget_ms: float = 2000.0
    degradation_ceiling: float = 0.05

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"gate metric must be one of {', '.join(METRICS)}: {self.metric!r}")
        if self.margin < 0:
            raise ValueError("gate margin must be 0 or more")
        if self.latency_budget_ms <= 0:
            raise ValueError("gate latency budget must be positive")
        if not 0 <= self.degradation_ceiling <= 1:
            raise ValueError("gate degradation ceiling is a share: between 0 and 1")


@dataclass(frozen=True)
class TaskResult:
    """One judged task as one policy handled it (an evaluation row, typed)."""

    id: str
    category: str
    language: str
    words: int  # of the question
    relevant: frozenset[str]
    metrics: Mapping[str, float]
    # Documents of the passages the turn shows, in order (empty when it asked back).
    sources: tuple[str, ...] = ()
    # Each expected fact found in the answer; None when answers were not built.
    facts: Mapping[str, bool] | None = None
    rewrite_ms: float = 0.0
    total_ms: float = 0.0
    model_calls: int = 0
    # A model rewrite that failed over to the rules (timeout, bad output).
    fell_back: bool = False


@dataclass(frozen=True)
class TurnResult:
    """One real turn replayed with one policy: no judgement, only what it did."""

    id: str
    queries: tuple[str, ...]
    sources: tuple[str, ...]
    decision: str  # "searched", "asked back" or "no search"
    rewrite_ms: float = 0.0
    total_ms: float = 0.0
    model_calls: int = 0
    fell_back: bool = False


@dataclass(frozen=True)
class GroupRow:
    """One group of judged tasks (overall, a category, a language, a length band)."""

    kind: str  # "overall", "category", "language", "length"
    group: str
    n: int
    current: dict[str, float]
    candidate: dict[str, float]
    delta: dict[str, float]
    worse: int
    better: int


@dataclass(frozen=True)
class PolicyFigures:
    """One policy's answers, coverage, latency and cost over the shadow run."""

    policy: str
    fact_recall: float | None
    facts: int
    source_coverage: float | None
    multi_topic_tasks: int
    rewrite_p50_ms: float
    rewrite_p95_ms: float
    total_p50_ms: float
    total_p95_ms: float
    turns_timed: int
    model_calls: int
    fell_back: int
    # The chat clients report no token counts: None says "not reported", not 0.
    tokens: int | None = None


@dataclass(frozen=True)
class RealTurns:
    """How the candidate's replay of real turns differs from the current policy's."""

    n: int
    queries_changed: float
    decision_changed: float
    # Over the turns where both showed sources.
    compared: int
    first_source_same: float | None
    source_overlap: float | None  # mean Jaccard of the shown documents
    changed_turns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TaskChange:
    """A judged task whose primary metric the candidate changed."""

    id: str
    category: str
    current: float
    candidate: float


@dataclass(frozen=True)
class Criterion:
    name: str  # "margin", "latency", "degradation", "judged tasks"
    passed: bool
    value: float
    limit: float
    reason: str


@dataclass(frozen=True)
class GateReport:
    current: PolicyFigures
    candidate: PolicyFigures
    config: GateConfig
    tasks: int
    judged: int
    groups: list[GroupRow]
    degradation_rate: float
    improvement_rate: float
    worse_tasks: list[str]
    better_tasks: list[str]
    # Every task the candidate made worse or better, worst first.
    changes: list[TaskChange]
    real_turns: RealTurns | None
    criteria: list[Criterion]
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (stored on the gate run, read by the admin's page)."""
        return asdict(self)


def question_words(text: str) -> int:
    return len(_WORD.findall(text))


def length_band(words: int) -> str:
    """short (up to 4 words), medium (5 to 9), long (10 or more)."""
    if words <= SHORT_MAX_WORDS:
        return "short"
    return "medium" if words <= MEDIUM_MAX_WORDS else "long"


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def _means(tasks: Sequence[TaskResult]) -> dict[str, float]:
    return {m: _mean(t.metrics.get(m, 0.0) for t in tasks) for m in METRICS}


def _paired(
    current: Sequence[TaskResult], candidate: Sequence[TaskResult]
) -> list[tuple[TaskResult, TaskResult]]:
    by_id = {t.id: t for t in candidate}
    if len(by_id) != len(candidate) or len({t.id for t in current}) != len(current):
        raise ValueError("task ids must be unique")
    if set(by_id) != {t.id for t in current}:
        raise ValueError("current and candidate must have run on the same tasks")
    return [(t, by_id[t.id]) for t in current]


def _group_rows(pairs: Sequence[tuple[TaskResult, TaskResult]], metric: str) -> list[GroupRow]:
    judged = [(a, b) for a, b in pairs if a.relevant]
    keys: list[tuple[str, Callable[[TaskResult], str]]] = [
        ("category", lambda t: t.category),
        ("language", lambda t: t.language or "?"),
        ("length", lambda t: length_band(t.words)),
    ]
    groups: list[tuple[str, str, list[tuple[TaskResult, TaskResult]]]] = [
        ("overall", "overall", judged)
    ]
    for kind, key in keys:
        buckets: dict[str, list[tuple[TaskResult, TaskResult]]] = defaultdict(list)
        for pair in judged:
            buckets[key(pair[0])].append(pair)
        order = LENGTHS if kind == "length" else tuple(sorted(buckets))
        groups += [(kind, name, buckets[name]) for name in order if buckets.get(name)]
    rows = []
    for kind, name, items in groups:
        current = _means([a for a, _ in items])
        candidate = _means([b for _, b in items])
        rows.append(
            GroupRow(
                kind=kind,
                group=name,
                n=len(items),
                current=current,
                candidate=candidate,
                delta={m: candidate[m] - current[m] for m in METRICS},
                worse=sum(_worse(a, b, metric) for a, b in items),
                better=sum(_worse(b, a, metric) for a, b in items),
            )
        )
    return rows


def _worse(current: TaskResult, candidate: TaskResult, metric: str) -> bool:
    return candidate.metrics.get(metric, 0.0) < current.metrics.get(metric, 0.0) - EPSILON


def _coverage(tasks: Sequence[TaskResult]) -> tuple[float | None, int]:
    """Mean share of a multi-topic task's judged documents with a source shown."""
    multi = [t for t in tasks if t.category == MULTI_TOPIC and t.relevant]
    if not multi:
        return None, 0
    return _mean(len(t.relevant & set(t.sources)) / len(t.relevant) for t in multi), len(multi)


def _facts(tasks: Sequence[TaskResult]) -> tuple[float | None, int]:
    hits = [hit for t in tasks if t.facts for hit in t.facts.values()]
    if not hits:
        return None, 0
    return _mean(float(h) for h in hits), len(hits)


def _figures(
    policy: str, tasks: Sequence[TaskResult], turns: Sequence[TurnResult]
) -> PolicyFigures:
    rewrite = [t.rewrite_ms for t in tasks] + [t.rewrite_ms for t in turns]
    total = [t.total_ms for t in tasks] + [t.total_ms for t in turns]
    fact_recall, facts = _facts(tasks)
    coverage, multi = _coverage(tasks)
    return PolicyFigures(
        policy=policy,
        fact_recall=fact_recall,
        facts=facts,
        source_coverage=coverage,
        multi_topic_tasks=multi,
        rewrite_p50_ms=percentile(rewrite, 50),
        rewrite_p95_ms=percentile(rewrite, 95),
        total_p50_ms=percentile(total, 50),
        total_p95_ms=percentile(total, 95),
        turns_timed=len(rewrite),
        model_calls=sum(t.model_calls for t in tasks) + sum(t.model_calls for t in turns),
        fell_back=sum(t.fell_back for t in tasks) + sum(t.fell_back for t in turns),
    )


def _real_turns(current: Sequence[TurnResult], candidate: Sequence[TurnResult]) -> RealTurns:
    by_id = {t.id: t for t in candidate}
    if set(by_id) != {t.id for t in current}:
        raise ValueError("current and candidate must have replayed the same turns")
    pairs = [(t, by_id[t.id]) for t in current]
    both = [(a, b) for a, b in pairs if a.sources and b.sources]
    changed = [a.id for a, b in pairs if a.queries != b.queries or a.decision != b.decision]
    n = len(pairs)
    return RealTurns(
        n=n,
        queries_changed=_mean(float(a.queries != b.queries) for a, b in pairs),
        decision_changed=_mean(float(a.decision != b.decision) for a, b in pairs),
        compared=len(both),
        first_source_same=(
            _mean(float(a.sources[0] == b.sources[0]) for a, b in both) if both else None
        ),
        source_overlap=(
            _mean(
                len(set(a.sources) & set(b.sources)) / len(set(a.sources) | set(b.sources))
                for a, b in both
            )
            if both
            else None
        ),
        changed_turns=changed,
    )


def gate_report(
    *,
    current_policy: str,
    candidate_policy: str,
    current: Sequence[TaskResult],
    candidate: Sequence[TaskResult],
    config: GateConfig,
    current_turns: Sequence[TurnResult] = (),
    candidate_turns: Sequence[TurnResult] = (),
) -> GateReport:
    """Compare the two policies' results on the same tasks (and turns) and decide."""
    pairs = _paired(current, candidate)
    metric = config.metric
    groups = _group_rows(pairs, metric)
    overall = groups[0]
    judged = overall.n
    worse = [a.id for a, b in pairs if a.relevant and _worse(a, b, metric)]
    better = [a.id for a, b in pairs if a.relevant and _worse(b, a, metric)]
    degradation = len(worse) / judged if judged else 0.0
    changes = sorted(
        (
            TaskChange(a.id, a.category, a.metrics.get(metric, 0.0), b.metrics.get(metric, 0.0))
            for a, b in pairs
            if a.relevant and (_worse(a, b, metric) or _worse(b, a, metric))
        ),
        key=lambda c: (c.candidate - c.current, c.id),
    )
    cand = _figures(candidate_policy, candidate, candidate_turns)
    real = _real_turns(current_turns, candidate_turns) if current_turns or candidate_turns else None
    delta = overall.delta[metric]
    criteria = [
        Criterion(
            "judged tasks",
            judged > 0,
            float(judged),
            1.0,
            f"{judged} judged tasks" if judged else "no judged task: nothing to compare",
        ),
        Criterion(
            "margin",
            judged > 0 and delta >= config.margin - EPSILON,
            delta,
            config.margin,
            f"{metric} {overall.current[metric]:.3f} → {overall.candidate[metric]:.3f} "
            f"(Δ {delta:+.3f}, needs ≥ {config.margin:+.3f})",
        ),
        Criterion(
            "latency",
            cand.rewrite_p95_ms <= config.latency_budget_ms,
            cand.rewrite_p95_ms,
            config.latency_budget_ms,
            f"candidate rewrite p95 {cand.rewrite_p95_ms:.1f} ms over {cand.turns_timed} turns "
            f"(budget {config.latency_budget_ms:.0f} ms)",
        ),
        Criterion(
            "degradation",
            degradation <= config.degradation_ceiling + EPSILON,
            degradation,
            config.degradation_ceiling,
            f"{len(worse)} of {judged} judged tasks worse on {metric} ({degradation:.1%}, "
            f"ceiling {config.degradation_ceiling:.1%})",
        ),
    ]
    return GateReport(
        current=_figures(current_policy, current, current_turns),
        candidate=cand,
        config=config,
        tasks=len(pairs),
        judged=judged,
        groups=groups,
        degradation_rate=degradation,
        improvement_rate=len(better) / judged if judged else 0.0,
        worse_tasks=worse,
        better_tasks=better,
        changes=changes,
        real_turns=real,
        criteria=criteria,
        passed=all(c.passed for c in criteria),
    )


# --- the report as text (manage.py gate) --------------------------------------------------------

_SHOWN = (("recall@5", "R@5"), ("recall@10", "R@10"), ("mrr@10", "MRR@10"), ("ndcg@10", "nDCG@10"))


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def report_text(report: Mapping[str, Any]) -> str:
    """The stored report (`GateReport.to_dict()`) as the command prints it."""
    config = report["config"]
    metric = config["metric"]
    current, candidate = report["current"], report["candidate"]
    lines = [
        f"promotion gate: candidate {candidate['policy']} vs current {current['policy']}",
        f"primary {metric}, margin {config['margin']:+.3f}, rewrite p95 budget "
        f"{config['latency_budget_ms']:.0f} ms, degradation ceiling "
        f"{config['degradation_ceiling']:.1%}; {report['tasks']} tasks, {report['judged']} judged",
        "",
        f"{'group':<24} {'n':>3} "
        + " ".join(f"{label + ' cur→cand':>19}" for _, label in _SHOWN)
        + f" {'Δ' + metric:>10} {'worse':>5} {'better':>6}",
    ]
    for row in report["groups"]:
        name = row["group"] if row["kind"] == "overall" else f"{row['kind']}: {row['group']}"
        cells = " ".join(
            f"{row['current'][m]:>9.3f}→{row['candidate'][m]:<9.3f}" for m, _ in _SHOWN
        )
        lines.append(
            f"{name[:24]:<24} {row['n']:>3} {cells} {row['delta'][metric]:>+10.3f} "
            f"{row['worse']:>5} {row['better']:>6}"
        )
    lines += [
        "",
        f"answer-fact recall      {_share(current['fact_recall'])} → "
        f"{_share(candidate['fact_recall'])} ({candidate['facts']} facts)",
        f"source coverage         {_share(current['source_coverage'])} → "
        f"{_share(candidate['source_coverage'])} ({candidate['multi_topic_tasks']} multi-topic "
        "tasks: share of their judged documents with a source shown)",
        f"degradation rate        {report['degradation_rate']:.3f} ({len(report['worse_tasks'])} "
        "worse: "
        + (
            ", ".join(
                f"{c['id']} {c['category']} {c['current']:.3f}→{c['candidate']:.3f}"
                for c in report["changes"]
                if c["candidate"] < c["current"]
            )
            or "none"
        )
        + ")",
        f"improvement rate        {report['improvement_rate']:.3f} "
        f"({len(report['better_tasks'])} better)",
    ]
    for side in (current, candidate):
        tokens = "not reported" if side["tokens"] is None else str(side["tokens"])
        lines.append(
            f"{side['policy'][:40]:<40} rewrite p50 {side['rewrite_p50_ms']:.1f} / p95 "
            f"{side['rewrite_p95_ms']:.1f} ms, total p50 {side['total_p50_ms']:.1f} / p95 "
            f"{side['total_p95_ms']:.1f} ms over {side['turns_timed']} turns (tasks and real); "
            f"model calls {side['model_calls']} (fell back {side['fell_back']}), tokens {tokens}"
        )
    real = report.get("real_turns")
    if real:
        lines.append(
            f"real turns replayed     {real['n']}: queries changed {real['queries_changed']:.1%}, "
            f"decision changed {real['decision_changed']:.1%}, same first source "
            f"{_share(real['first_source_same'])}, shown-document overlap "
            f"{_share(real['source_overlap'])} (over {real['compared']} turns with sources)"
        )
    lines += ["", "verdict: " + ("PASS: may be promoted" if report["passed"] else "FAIL")]
    lines += [
        f"  [{'pass' if c['passed'] else 'FAIL'}] {c['name']}: {c['reason']}"
        for c in report["criteria"]
    ]
    return "\n".join(lines)
