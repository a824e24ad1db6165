"""Evaluation runs started from the admin: created, executed by a worker, compared over time.

The scoring is `conversations.quality.evaluate.evaluate_mode`, the code `manage.py evaluate`
uses; a run evaluates the live collection with its current glossary, so successive runs show
whether the knowledge base and its vocabulary are getting better.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from asgiref.sync import async_to_sync, sync_to_async
from celery import shared_task
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from conversations.quality.cases import eval_case_records
from conversations.quality.chart import LineChart, RunValues, line_chart
from conversations.quality.datasets import EvalTask, EvaluationInputError, task_from_record
from conversations.quality.evaluate import ModeReport, evaluate_mode
from conversations.quality.models import EvaluationRun
from retrieval.models import Collection
from retrieval.pipeline.retrieve import REWRITE_MODES, RewriteMode
from retrieval.services import chat_model, scope_for_user

logger = logging.getLogger(__name__)
PROGRESS_EVERY_S = 0.5
HISTORY_RUNS = 30
ROW_KEYS = ("id", "mode", "category", "queries", "ranked", "clarified", "relevant")


def evaluation_modes_available() -> list[str]:
    """Rewrite modes an admin may pick: llm only when a chat model is configured."""
    modes = ["none", "last-turn", "rules"]
    if settings.CHATRAG_LLM_BACKEND:
        modes.append("llm")
    return modes


@transaction.atomic
def evaluation_run_create(
    *,
    collection: Collection,
    source: str,
    source_label: str,
    tasks: Sequence[dict[str, Any]],
    modes: Sequence[str],
    ks: Sequence[int],
    user: User | None = None,
) -> EvaluationRun:
    """Validate and store a run, then queue it once the transaction commits."""
    if not tasks:
        raise EvaluationInputError("there are no tasks to evaluate")
    for number, record in enumerate(tasks, start=1):
        task_from_record(dict(record), where=f"task {number}")
    unknown = [m for m in modes if m not in REWRITE_MODES]
    if unknown or not modes:
        raise EvaluationInputError(f"unknown or missing rewrite modes: {unknown}")
    if not ks or any(k < 1 for k in ks):
        raise EvaluationInputError("k must be positive numbers")
    turns, limit = len(tasks) * len(modes), settings.CHATRAG_EVAL_MAX_TURNS
    if turns > limit:
        raise EvaluationInputError(
            f"this run would score {turns} turns ({len(tasks)} tasks x {len(modes)} modes), "
            f"more than the {limit} a run may (CHATRAG_EVAL_MAX_TURNS): it would hold the "
            "worker that ingests documents; split the tasks or run manage.py evaluate"
        )
    run = EvaluationRun.objects.create(
        collection=collection,
        source=source,
        source_label=source_label[:200],
        tasks=list(tasks),
        modes=list(modes),
        ks=sorted(set(ks)),
        total=len(tasks) * len(modes),
        created_by=user,
    )
    transaction.on_commit(lambda: evaluate_run.delay(run.pk))
    return run


def evaluation_run_again(*, run: EvaluationRun, user: User | None = None) -> EvaluationRun:
    """Queue a new run like this one: the same file's tasks, or the cases as they are now."""
    if run.source == EvaluationRun.Source.CASES:
        tasks = eval_case_records(collection=run.collection)
    else:
        tasks = list(run.tasks)
    return evaluation_run_create(
        collection=run.collection,
        source=run.source,
        source_label=run.source_label,
        tasks=tasks,
        modes=run.modes,
        ks=run.ks,
        user=user,
    )


def evaluation_run_execute(*, run_id: int) -> EvaluationRun:
    """Score every task in every mode, recording progress; a failure is recorded, not raised."""
    # Claim it: a message the broker delivers again must not run a finished run twice.
    claimed = EvaluationRun.objects.filter(pk=run_id, status=EvaluationRun.Status.QUEUED).update(
        status=EvaluationRun.Status.RUNNING, started_at=timezone.now(), done=0
    )
    run = EvaluationRun.objects.select_related("collection", "created_by").get(pk=run_id)
    if not claimed:
        logger.warning("evaluation run %s is %s, not queued: not run again", run.pk, run.status)
        return run
    try:
        tasks = [
            task_from_record(dict(r), where=f"task {n}", default_id=str(n))
            for n, r in enumerate(run.tasks, start=1)
        ]
        notes = []
        if run.created_by is not None and not run.created_by.is_superuser:
            notes.append(f"searched as {run.created_by.username}: only what they may read")
        if "llm" in run.modes and not settings.CHATRAG_LLM_BACKEND:
            notes.append("llm: no model server configured, the rule rewriter was used")
        reports = async_to_sync(_evaluate)(run, tasks)
        run.report = {
            "ks": run.ks,
            "tasks": len(tasks),
            "modes": {mode: report.summary() for mode, report in reports.items()},
            "rows": [
                {
                    **{k: row[k] for k in ROW_KEYS if k in row},
                    **{k: v for k, v in row.items() if "@" in k},
                }
                for report in reports.values()
                for row in report.rows
            ],
            "notes": notes,
        }
        run.status = EvaluationRun.Status.DONE
        run.done = run.total
    except Exception as exc:  # the run records why it failed; the worker keeps going
        run.status = EvaluationRun.Status.FAILED
        run.error = f"{exc.__class__.__name__}: {exc}"[:2000]
    run.finished_at = timezone.now()
    run.save(update_fields=["report", "status", "done", "error", "finished_at"])
    return run


# The Celery task lives beside the run it queues (`conversations.quality.tasks` imports it for
# the worker: no import circle). Its name is from when runs were the knowledge base's: a run
# queued before the move still finds it.
@shared_task(name="retrieval.evaluate_run", acks_late=True)
def evaluate_run(run_id: int) -> None:
    """Run an evaluation started from the admin, recording progress and the report."""
    evaluation_run_execute(run_id=run_id)


@sync_to_async
def _save_progress(run_id: int, done: int) -> None:
    EvaluationRun.objects.filter(pk=run_id).update(done=done)


async def _evaluate(run: EvaluationRun, tasks: list[EvalTask]) -> dict[str, ModeReport]:
    loop = asyncio.get_running_loop()
    writes: list[asyncio.Task[None]] = []
    done, last = 0, 0.0

    def on_task() -> None:
        nonlocal done, last
        done += 1
        if time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            writes.append(loop.create_task(_save_progress(run.pk, done)))

    # A model of its own: the process-wide one's client belongs to another event loop.
    model = chat_model(fresh=True) if "llm" in run.modes else None
    reports: dict[str, ModeReport] = {}
    # A run started from the admin searches as whoever started it, like the chat and "retry
    # now": with every document, its report ranked "[restricted document]" for questions of
    # the starter's choosing (whether restricted text matches them: a statistic over text
    # they may not read). Runs the app makes itself (no one behind them) read everything.
    scope = (
        await sync_to_async(scope_for_user)(user=run.created_by, collection=run.collection)
        if run.created_by is not None
        else None
    )
    try:
        for mode in run.modes:
            reports[mode] = await evaluate_mode(
                tasks=tasks,
                collection=run.collection,
                mode=cast(RewriteMode, mode),
                ks=list(run.ks),
                language=None,
                model=model,
                on_task=on_task,
                scope=scope,
                # A run compares rewrite modes; the model stages are measured by `manage.py
                # evaluate --stages` (minutes of model time a task on a small server).
                hyde=False,
                rerank=False,
            )
    finally:
        await asyncio.gather(*writes, return_exceptions=True)
        close = getattr(model, "aclose", None)
        if close is not None:
            await close()
    return reports


# --- reading runs -------------------------------------------------------------------------------


@dataclass
class ComparisonRow:
    """One category: n judged tasks and each metric's value per mode (None: not run)."""

    category: str
    n: int
    cells: list[tuple[float | None, bool]]  # (value, best of its metric)


@dataclass
class ModeLine:
    """Clarification precision/recall and total latency of one mode."""

    mode: str
    clarification: dict[str, float]
    latency: dict[str, dict[str, float]]


@dataclass
class Comparison:
    modes: list[str]
    metrics: list[str]
    rows: list[ComparisonRow]
    lines: list[ModeLine]


def run_metrics(run: EvaluationRun) -> list[str]:
    return [f"recall@{k}" for k in run.ks] + ["mrr@10", "ndcg@10"]


def run_comparison(run: EvaluationRun) -> Comparison | None:
    """Metrics per category with the modes side by side (rewriting against none)."""
    modes_report: dict[str, Any] = (run.report or {}).get("modes") or {}
    if not modes_report:
        return None
    modes = [m for m in run.modes if m in modes_report]
    metrics = run_metrics(run)
    categories: list[tuple[str, dict[str, Any]]] = []
    first = modes_report[modes[0]]
    categories.append(("overall", {m: modes_report[m]["overall"] for m in modes}))
    for category in first.get("by_category", {}):
        categories.append(
            (category, {m: modes_report[m]["by_category"].get(category, {}) for m in modes})
        )
    rows = []
    for name, per_mode in categories:
        n = max((int(v.get("n", 0)) for v in per_mode.values()), default=0)
        if not n:  # only clarification tasks: scored by the clarification line
            continue
        cells: list[tuple[float | None, bool]] = []
        for metric in metrics:
            values = [per_mode[m].get(metric) for m in modes]
            top = max((v for v in values if v is not None), default=0.0)
            cells.extend(
                (v, v is not None and len(modes) > 1 and top > 0 and v == top) for v in values
            )
        rows.append(ComparisonRow(name, n, cells))
    return Comparison(
        modes=modes,
        metrics=metrics,
        rows=rows,
        lines=[
            ModeLine(
                mode=m,
                clarification=modes_report[m].get("clarification", {}),
                latency=modes_report[m].get("latency_ms", {}),
            )
            for m in modes
        ],
    )


def run_history(
    run: EvaluationRun | None = None, *, metric: str = "mrr@10", limit: int = HISTORY_RUNS
) -> LineChart:
    """The metric across finished runs comparable with `run` (same collection and tasks
    source), oldest first; without a run, across the latest finished runs."""
    qs = EvaluationRun.objects.filter(status=EvaluationRun.Status.DONE)
    if run is not None:
        qs = qs.filter(collection=run.collection_id, source_label=run.source_label)
    runs = list(qs.order_by("-created_at", "-id")[:limit])[::-1]
    points = []
    modes: list[str] = []
    for item in runs:
        values = {}
        for mode, summary in ((item.report or {}).get("modes") or {}).items():
            value = (summary.get("overall") or {}).get(metric)
            if isinstance(value, int | float):
                values[mode] = float(value)
                if mode not in modes:
                    modes.append(mode)
        label = f"#{item.pk} {timezone.localtime(item.created_at):%d/%m}"
        points.append(RunValues(run_id=item.pk, label=label, values=values))
    order = [m for m in REWRITE_MODES if m in modes]
    return line_chart(
        points, metric=metric, modes=order, current=run.pk if run is not None else None
    )
