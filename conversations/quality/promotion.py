"""The promotion gate's shadow runs and the promotions they allow (the decision is `gate`).

A policy is a named rewrite configuration: the mode (none, last-turn, rules, llm), the model
for llm, and its version string (the rules' POLICY_VERSION, the llm prompt's hash). The
current policy is what the chat runs now (settings); a candidate is any other.

- **Judged tasks** (a tasks file in an evaluation collection, or the evaluation cases) run
  through `evaluate_mode` once per policy, exactly as `manage.py evaluate` runs them: every
  document of their collection is searched, as there.
- **Real turns**: the latest stored user turns are replayed through both policies with their
  masked question and masked window (never the raw message), searching as a reader of every
  public document and nothing else (no groups), so a replay never reaches a restricted
  document whoever's turn it was; when the window's answers were written from a document
  that is not public (or is gone), those answers are left out of the window. Real turns have
  no judgement: the report says how often the candidate changes the queries, the decision
  and the sources, and what it costs.
- The stored report names tasks and turns by id and holds numbers only: no question, query
  or document, so any staff member allowed to view gate runs may read all of it.
- **Promotion** records who promoted which policy over which, on which passing gate run, and
  the setting that makes the chat run it; the chat's policy stays the environment's
  (`CHATRAG_REWRITE_MODE`, `CHATRAG_LLM_MODEL`), so every process changes together at the
  next deploy (see README, "Promotion gate").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction

from conversations.models import TurnTrace
from conversations.quality.datasets import EvalTask
from conversations.quality.evaluate import ModeReport, evaluate_mode
from conversations.quality.gate import (
    GateConfig,
    GateReport,
    TaskResult,
    TurnResult,
    gate_report,
    question_words,
)
from conversations.quality.models import GateRun, PolicyPromotion
from conversations.quality.review.selectors import window_documents
from retrieval.models import Collection, Document
from retrieval.pipeline.llm import ChatModel
from retrieval.pipeline.plan import TurnPlan, plan_turn
from retrieval.pipeline.retrieve import REWRITE_MODES, RewriteMode
from retrieval.pipeline.rewrite_llm import llm_policy
from retrieval.pipeline.rewrite_rules import POLICY_VERSION as RULES_POLICY
from retrieval.pipeline.search import Scope
from retrieval.pipeline.types import HistoryMessage
from retrieval.services import (
    chat_model,
    default_collection,
    retrieval_settings,
    turn_backends_for,
    turn_request_for,
)

PERMISSION = "quality.promote_policy"
KS = (5, 10)


class GateInputError(Exception):
    """A policy, a task source or a sample size the gate cannot run with."""


class PromotionRefused(Exception):
    """The gate run does not allow this promotion (it failed, is stale, or cannot run)."""


@dataclass(frozen=True)
class Policy:
    """A rewrite configuration: mode, model (llm only) and the version it stands for."""

    mode: RewriteMode
    model: str = ""

    @property
    def version(self) -> str:
        if self.mode == "rules":
            return RULES_POLICY
        if self.mode == "llm":
            return llm_policy(self.model)
        return self.mode

    def setting(self) -> str | None:
        """The environment that makes the chat run this policy; None: no setting can."""
        if self.mode == "rules":
            return "CHATRAG_REWRITE_MODE=rules"
        if self.mode == "llm":
            return f"CHATRAG_REWRITE_MODE=llm CHATRAG_LLM_MODEL={self.model}"
        return None  # CHATRAG_REWRITE_MODE takes auto, rules or llm: the baselines never run


def policy_running() -> Policy:
    """The policy the chat's turns use now (CHATRAG_REWRITE_MODE, the model server)."""
    mode = retrieval_settings().mode
    return Policy(mode, settings.CHATRAG_LLM_MODEL if mode == "llm" else "")


def policy_named(*, mode: str, model: str | None = None) -> Policy:
    """A policy from its mode (and, for llm, a model on the configured server)."""
    if mode not in REWRITE_MODES:
        raise GateInputError(
            f"unknown rewrite mode {mode!r}: choose from {', '.join(REWRITE_MODES)}"
        )
    if mode != "llm":
        if model:
            raise GateInputError(f"--model is for the llm policy, not {mode!r}")
        return Policy(mode)
    if not settings.CHATRAG_LLM_BACKEND:
        # evaluate falls back to the rules; a gate doing so would judge the wrong policy.
        raise GateInputError("an llm policy needs a model server: CHATRAG_LLM_BACKEND is not set")
    name = model or settings.CHATRAG_LLM_MODEL
    if not name:
        raise GateInputError("an llm policy needs a model: --model or CHATRAG_LLM_MODEL")
    return Policy("llm", name)


def gate_config() -> GateConfig:
    """The gate's thresholds from settings (CHATRAG_GATE_*)."""
    return GateConfig(
        metric=settings.CHATRAG_GATE_METRIC,
        margin=settings.CHATRAG_GATE_MARGIN,
        latency_budget_ms=settings.CHATRAG_GATE_LATENCY_BUDGET_MS,
        degradation_ceiling=settings.CHATRAG_GATE_DEGRADATION_CEILING,
    )


# --- the shadow run ---------------------------------------------------------------------------


def task_results(report: ModeReport, *, calls_model: bool) -> list[TaskResult]:
    """An evaluation's rows as the gate's typed task results."""
    out = []
    for row in report.rows:
        timings = row.get("timings_ms") or {}
        answer = row.get("answer")
        fell_back = calls_model and not str(row.get("policy") or "").startswith("llm/")
        out.append(
            TaskResult(
                id=str(row["id"]),
                category=str(row["category"]),
                language=str(row.get("language") or ""),
                words=question_words(str(row["question"])),
                relevant=frozenset(row["relevant"]),
                metrics={k: float(v) for k, v in row.items() if "@" in k},
                sources=tuple(row["passages"]),
                facts=dict(answer["facts"]) if answer else None,
                rewrite_ms=float(timings.get("rewrite", 0.0)),
                total_ms=float(sum(timings.values())),
                model_calls=int(calls_model),
                fell_back=fell_back,
            )
        )
    return out


@dataclass(frozen=True)
class ReplayTurn:
    """A stored turn as the replay sees it: masked text only."""

    id: str
    question: str
    window: tuple[HistoryMessage, ...]
    answers_left_out: bool


def real_turns_sample(*, limit: int) -> list[ReplayTurn]:
    """The latest `limit` user turns with a trace, masked, ready to replay as a public reader.

    The window's answers are kept only when every document behind the window (its answers'
    sources, its turns' hits) is public: otherwise the user's own turns are kept alone.
    """
    if limit <= 0:
        return []
    traces = (
        TurnTrace.objects.exclude(masked_question="")
        .select_related("message")
        .order_by("-created_at", "-id")[:limit]
    )
    collection = default_collection()
    out = []
    for trace in traces:
        window = tuple(
            HistoryMessage("user" if m.get("role") == "user" else "assistant", str(m["text"]))
            for m in trace.masked_window
            if isinstance(m, dict) and isinstance(m.get("text"), str)
        )
        public = _all_public(window_documents(question=trace.message) if window else [], collection)
        if not public:
            window = tuple(m for m in window if m.role == "user")
        out.append(
            ReplayTurn(
                id=str(trace.pk),
                question=trace.masked_question,
                window=window,
                answers_left_out=not public,
            )
        )
    return out


def _all_public(document_ids: Sequence[int], collection: Collection) -> bool:
    """Whether every one of these documents exists and names no group (0: one that is gone)."""
    wanted = set(document_ids)
    if not wanted:
        return True
    if 0 in wanted:
        return False
    public = Document.objects.filter(collection=collection, pk__in=wanted, groups__isnull=True)
    return public.count() == len(wanted)


_DECISIONS = {"small_talk": "no search", "ask_back": "asked back", "answer": "searched"}


def _turn_result(turn: ReplayTurn, plan: TurnPlan, *, calls_model: bool) -> TurnResult:
    outcome, rewrite = plan.outcome, plan.outcome.rewrite
    decision = _DECISIONS[plan.kind]
    sources = [] if decision != "searched" else [m.hit.external_id for m in outcome.passages]
    return TurnResult(
        id=turn.id,
        queries=tuple(q.text for q in outcome.queries) if plan.kind != "small_talk" else (),
        sources=tuple(dict.fromkeys(sources)),
        decision=decision,
        rewrite_ms=float(outcome.timings_ms.get("rewrite", 0.0)),
        total_ms=float(sum(outcome.timings_ms.values())),
        model_calls=int(calls_model),
        fell_back=calls_model and not (rewrite.policy or "").startswith("llm/"),
    )


@dataclass
class ShadowRun:
    current: list[TaskResult]
    candidate: list[TaskResult]
    current_turns: list[TurnResult]
    candidate_turns: list[TurnResult]


async def turns_replay(
    turns: Sequence[ReplayTurn], policy: Policy, model: ChatModel | None
) -> list[TurnResult]:
    """Replay stored turns (masked) with one policy, as a reader of public documents only."""
    collection = await sync_to_async(default_collection)()
    scope = Scope(collection_id=collection.id)  # public documents only, whoever's turn it was
    pipeline = await sync_to_async(retrieval_settings)(mode=policy.mode)
    backends = await sync_to_async(turn_backends_for)(
        collection=collection, scope=scope, model=model, cached=False
    )
    out = []
    for turn in turns:
        request = await sync_to_async(turn_request_for)(
            question=turn.question,
            history=turn.window,
            collection=collection,
            scope=scope,
            settings=pipeline,
        )
        plan = await plan_turn(request, backends)
        out.append(_turn_result(turn, plan, calls_model=model is not None))
    return out


async def _shadow(
    *,
    current: Policy,
    candidate: Policy,
    tasks: Sequence[EvalTask],
    collection: Collection,
    turns: Sequence[ReplayTurn],
    answers: bool,
    on_task: Callable[[], object] | None,
) -> ShadowRun:
    models: dict[Policy, ChatModel | None] = {}
    results: dict[Policy, tuple[list[TaskResult], list[TurnResult]]] = {}
    try:
        for policy in (current, candidate):
            # A model of its own per llm policy, in this event loop (closed below).
            model = (
                chat_model(fresh=True, model_name=policy.model) if policy.mode == "llm" else None
            )
            models[policy] = model
            report = await evaluate_mode(
                tasks=tasks,
                collection=collection,
                mode=policy.mode,
                ks=list(KS),
                language=None,
                model=model,
                on_task=on_task,
                answers=answers,
                # Both policies' answers are extractive: fact recall then measures what the
                # rewrite retrieved, not which model wrote the answer.
                answer_model=None,
                # The gate compares rewrite policies; the model stages are measured by
                # `manage.py evaluate --stages`.
                hyde=False,
                rerank=False,
            )
            replayed = await turns_replay(turns, policy, model)
            results[policy] = (task_results(report, calls_model=model is not None), replayed)
    finally:
        for model in models.values():
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
    return ShadowRun(
        current=results[current][0],
        candidate=results[candidate][0],
        current_turns=results[current][1],
        candidate_turns=results[candidate][1],
    )


def gate_run(
    *,
    current: Policy,
    candidate: Policy,
    tasks: Sequence[EvalTask],
    collection: Collection,
    source: str,
    source_label: str,
    real_turns: int,
    answers: bool = True,
    config: GateConfig | None = None,
    user: User | None = None,
    on_task: Callable[[], object] | None = None,
) -> tuple[GateRun, GateReport]:
    """Run both policies in shadow, decide, and keep the report (a GateRun row)."""
    if current == candidate:
        raise GateInputError(f"the candidate is the current policy ({current.version})")
    if not tasks:
        raise GateInputError("there are no tasks to evaluate")
    if real_turns < 0:
        raise GateInputError("the real-turn sample cannot be negative")
    config = config or gate_config()
    turns = real_turns_sample(limit=real_turns)
    shadow = async_to_sync(_shadow)(
        current=current,
        candidate=candidate,
        tasks=tasks,
        collection=collection,
        turns=turns,
        answers=answers,
        on_task=on_task,
    )
    report = gate_report(
        current_policy=current.version,
        candidate_policy=candidate.version,
        current=shadow.current,
        candidate=shadow.candidate,
        config=config,
        current_turns=shadow.current_turns,
        candidate_turns=shadow.candidate_turns,
    )
    data: dict[str, Any] = report.to_dict()
    data["real_turn_answers_left_out"] = sum(t.answers_left_out for t in turns)
    run = gate_run_record(
        current=current,
        candidate=candidate,
        source=source,
        source_label=source_label,
        real_turns=len(turns),
        report=data,
        passed=report.passed,
        user=user,
    )
    return run, report


@transaction.atomic
def gate_run_record(
    *,
    current: Policy,
    candidate: Policy,
    source: str,
    source_label: str,
    real_turns: int,
    report: dict[str, Any],
    passed: bool,
    user: User | None = None,
) -> GateRun:
    """Keep a gate run's report."""
    return GateRun.objects.create(
        current_mode=current.mode,
        current_model=current.model,
        current_policy=current.version,
        candidate_mode=candidate.mode,
        candidate_model=candidate.model,
        candidate_policy=candidate.version,
        source=source,
        source_label=source_label[:200],
        real_turns=real_turns,
        report=report,
        passed=passed,
        created_by=user,
    )


# --- promotion --------------------------------------------------------------------------------


def gate_candidate(gate: GateRun) -> Policy:
    return Policy(gate.candidate_mode, gate.candidate_model)  # type: ignore[arg-type]


def promotion_refusal(*, gate: GateRun) -> str | None:
    """Why this gate run cannot promote its candidate now, or None when it can."""
    if not gate.passed:
        failed = [
            c.get("name", "?") for c in (gate.report or {}).get("criteria", []) if not c["passed"]
        ]
        return "the candidate did not pass the gate (" + ", ".join(failed) + ")"
    candidate = gate_candidate(gate)
    if candidate.setting() is None:
        return f"the chat cannot run {candidate.mode!r} (CHATRAG_REWRITE_MODE: auto, rules, llm)"
    running = policy_running()
    if running.version != gate.current_policy:
        return (
            f"the gate compared against {gate.current_policy}, but the chat runs "
            f"{running.version}: run the gate again against the running policy"
        )
    if candidate.version != gate.candidate_policy:
        return (
            f"the candidate changed since the gate ran ({gate.candidate_policy} → "
            f"{candidate.version}): run the gate again"
        )
    return None


@transaction.atomic
def policy_promote(*, gate: GateRun, user: User) -> PolicyPromotion:
    """Record the promotion of a passing gate run's candidate (its setting to deploy)."""
    if not (user.is_active and user.has_perm(PERMISSION)):
        raise PermissionDenied("promoting a rewrite policy needs quality.promote_policy")
    gate = GateRun.objects.select_for_update().get(pk=gate.pk)
    refusal = promotion_refusal(gate=gate)
    if refusal:
        raise PromotionRefused(refusal)
    candidate = gate_candidate(gate)
    return PolicyPromotion.objects.create(
        gate=gate,
        from_policy=gate.current_policy,
        to_policy=gate.candidate_policy,
        to_mode=candidate.mode,
        to_model=candidate.model,
        setting=candidate.setting() or "",
        promoted_by=user,
    )


def promotion_pending() -> PolicyPromotion | None:
    """The latest promotion, when the chat does not run its policy yet (setting not deployed)."""
    latest = PolicyPromotion.objects.select_related("promoted_by").first()
    if latest is None or latest.to_policy == policy_running().version:
        return None
    return latest
