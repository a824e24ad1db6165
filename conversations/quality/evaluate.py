"""Run judged tasks through the real retrieval pipeline (and, asked, the answer) and score them."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.utils import timezone

from conversations.quality.datasets import EvalTask
from conversations.quality.scoring import (
    CEILING_PAGES,
    FACT_WORDS,
    answer_scores,
    clarification_scores,
    fact_checks,
    first_words,
    grouped,
    no_search_scores,
    retrieval_scores,
    term_checks,
    term_scores,
    token_recall,
    word_count,
)
from retrieval.models import Collection
from retrieval.pipeline.answer import context_passages
from retrieval.pipeline.fusion import ranked_documents
from retrieval.pipeline.llm import ChatModel
from retrieval.pipeline.metrics import mrr_at, ndcg_at, percentile, recall_at
from retrieval.pipeline.plan import TurnPlan, plan_turn
from retrieval.pipeline.respond import Answer, answer_turn
from retrieval.pipeline.retrieve import RetrievalOutcome, RewriteMode
from retrieval.pipeline.search import Scope
from retrieval.pipeline.tuning import DEFAULT_TUNING, Tuning
from retrieval.pipeline.types import SEARCH_RULES, LexiconView
from retrieval.services import retrieval_settings, turn_backends_for, turn_request_for

_EMPHASIS = re.compile(r"\*+|__")
# Modes whose rewrite may ask back or skip search; the baselines never do.
DECIDING_MODES = frozenset({"rules", "llm"})


@dataclass
class ModeReport:
    mode: str
    ks: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, row: dict[str, Any], timings_ms: Mapping[str, float]) -> None:
        """Keep one task's row and its stages' latencies (the answer's, when built)."""
        self.rows.append(row)
        for stage, ms in timings_ms.items():
            self.latencies[stage].append(ms)
        self.latencies["total"].append(sum(timings_ms.values()))
        if row.get("answer") is not None:
            self.latencies["answer"].append(row["answer"]["build_ms"])

    def summary(self) -> dict[str, Any]:
        """Figures overall, per category and per language (the JSON report's `modes`)."""
        rows = self.rows

        def scores(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
            return retrieval_scores(group, self.ks)

        out: dict[str, Any] = {
            "overall": scores(rows),
            # Turns with nothing before them: the rules must not make these worse (issue 36).
            "first_turns": scores([r for r in rows if r.get("first_turn")]),
            "by_category": grouped(rows, "category", scores),
            "by_language": grouped(rows, "language", scores),
            "clarification": clarification_scores(rows),
            "no_search": no_search_scores(rows),
            "query_terms": {
                "overall": term_scores(rows),
                "by_category": grouped(rows, "category", term_scores),
            },
            "latency_ms": {
                stage: {"p50": percentile(v, 50), "p95": percentile(v, 95)}
                for stage, v in self.latencies.items()
            },
        }
        if any(r.get("answer") is not None for r in rows):
            out["answers"] = {
                "overall": answer_scores(rows),
                "by_category": grouped(rows, "category", answer_scores),
                "by_language": grouped(rows, "language", answer_scores),
            }
        return out


def references_by_task(tasks: Sequence[EvalTask]) -> dict[str, str]:
    """Each task's reference answer: the assistant message that follows its question.

    MTRAG's tasks carry no answers, but the next turn of the same conversation has the
    question and its answer in its history (ids "<conversation><::><turn>").
    """
    by_id = {t.id: t for t in tasks}
    out: dict[str, str] = {}
    for task in tasks:
        conversation, sep, turn = task.id.rpartition("<::>")
        if not sep or not turn.isdigit():
            continue
        following = by_id.get(f"{conversation}<::>{int(turn) + 1}")
        if following is None:
            continue
        position = len(task.history)
        if (
            len(following.history) > position + 1
            and following.history[position].text == task.question
            and following.history[position + 1].role == "assistant"
        ):
            out[task.id] = following.history[position + 1].text
    return out


async def turn_answer(
    *,
    outcome: RetrievalOutcome,
    language: str,
    model: ChatModel | None,
    lexicon: Callable[[set[str]], LexiconView] | None = None,
) -> tuple[str, bool]:
    """The answer a turn would show for this outcome: (text, extractive).

    The chat's own answer step (`retrieval.pipeline.respond.answer_turn`), not streamed. A
    turn that found nothing counts as extractive here (no model wrote it).
    """
    answer = await turn_answer_built(
        outcome=outcome, language=language, model=model, lexicon=lexicon
    )
    return answer.text, answer.kind != "model"


async def turn_answer_built(
    *,
    outcome: RetrievalOutcome,
    language: str,
    model: ChatModel | None,
    lexicon: Callable[[set[str]], LexiconView] | None = None,
) -> Answer:
    """The turn's whole answer value (`turn_answer` keeps only its text and who wrote it)."""

    async def statistics(words: set[str]) -> LexiconView | None:
        assert lexicon is not None
        try:
            return await sync_to_async(lexicon)(words)
        except Exception:  # a statistics failure must not lose the answer: passages' rarity
            return None

    return await answer_turn(
        outcome=outcome,
        language=language,
        model=model,
        today=timezone.localdate(),
        model_timeout=django_settings.CHATRAG_LLM_TIMEOUT,
        lexicon=statistics if lexicon is not None else None,
    )


async def evaluate_mode(
    *,
    tasks: Sequence[EvalTask],
    collection: Collection,
    mode: RewriteMode,
    ks: list[int],
    language: str | None,
    model: ChatModel | None,
    on_task: Callable[[], object] | None = None,
    answers: bool = False,
    corpus_idf: bool = False,
    scope: Scope | None = None,
    answer_model: ChatModel | None | Literal["rewrite"] = "rewrite",
    hyde: bool | None = None,
    rerank: bool | None = None,
    on_plan: Callable[[TurnPlan], object] | None = None,
    tuning: Tuning = DEFAULT_TUNING,
) -> ModeReport:
    """Score every task with one rewrite mode (tasks run one at a time for clean latencies).

    `scope`: what the searches and the rewrite's word statistics may read; every document of
    the collection when None (the command line). `answer_model`: who writes the answers
    (None: extractive); by default the rewrite's model, as in the chat. `hyde` and `rerank`
    switch the optional model stages on or off (None: as the settings say); a stage on names
    the report ("rules+rerank") and its rows. `on_plan` sees each turn's plan
    (scripts/decisions_snapshot.py keeps the trace's notes). `tuning`: the decisions'
    thresholds (`evaluate --tuning FILE`).
    """
    writer = model if answer_model == "rewrite" else answer_model
    settings = await sync_to_async(retrieval_settings)(mode=mode, hyde=hyde, rerank=rerank)
    label = stages_label(mode, hyde=settings.hyde is not None, rerank=settings.rerank is not None)
    if scope is None:
        scope = Scope(collection_id=collection.id, see_everything=True)
    backends = await sync_to_async(turn_backends_for)(
        collection=collection, scope=scope, model=model, cached=False
    )
    lexicon = backends.lexicon
    report = ModeReport(mode=label, ks=ks)
    references = references_by_task(tasks) if answers else {}
    depth = max([10, *ks])
    for task in tasks:
        request = await sync_to_async(turn_request_for)(
            question=task.question,
            history=task.history,
            collection=collection,
            scope=scope,
            language=task.language or language,
            settings=settings,
            tuning=tuning,
        )
        plan = await plan_turn(request, backends)
        if on_plan is not None:
            on_plan(plan)
        outcome, turn_language = plan.outcome, plan.language
        row = task_row(task=task, plan=plan, mode=mode, ks=ks, depth=depth)
        row["mode"] = label
        row["language"] = turn_language
        row["timings_ms"] = dict(outcome.timings_ms)
        for name, record in (("hyde", outcome.hyde), ("rerank", outcome.rerank)):
            if record is not None:
                row[name] = {"status": record.status, "reason": record.reason, "ms": record.ms}
        if outcome.rerank is not None:
            row["rerank"]["moved"] = outcome.rerank.before != outcome.rerank.after
        if answers:
            row["answer"] = await answer_row(
                task=task,
                outcome=outcome,
                row=row,
                language=turn_language,
                model=writer,
                reference=references.get(task.id),
                lexicon=lexicon if corpus_idf else None,
            )
        report.add(row, outcome.timings_ms)
        if on_task:
            on_task()
    return report


def first_turns_against(
    baseline: ModeReport, report: ModeReport, ks: Sequence[int]
) -> dict[str, Any]:
    """How a mode's first turns compare with the baseline's (the no-rewrite mode's).

    A first turn must be searched and shown exactly as the baseline does unless a rule
    that changes its words or its decision fired (`types.SEARCH_RULES`): `unnamed` lists
    the turns that differ with no such rule, and should be empty.
    """
    before = {r["id"]: r for r in baseline.rows if r.get("first_turn")}
    metrics = [*(f"recall@{k}" for k in ks), "mrr@10"]
    identical, named, unnamed = 0, 0, []
    better, worse = 0, 0
    # Per named rule: the first turns it changed, and how many it made better or worse
    # (a turn several rules changed counts for each).
    by_rule: dict[str, dict[str, int]] = {}
    for row in report.rows:
        base = before.get(row["id"])
        if base is None:
            continue
        same = row["queries"] == base["queries"] and row["passages"] == base["passages"]
        same = same and row["ranked"] == base["ranked"] and row["clarified"] == base["clarified"]
        if same:
            identical += 1
            continue
        rules = sorted(SEARCH_RULES & set(row.get("rules", [])))
        if rules:
            named += 1
        else:
            unnamed.append(row["id"])
        delta = [row[m] - base[m] for m in metrics]
        up = any(d > 0 for d in delta) and all(d >= 0 for d in delta)
        down = any(d < 0 for d in delta)
        better, worse = better + up, worse + down
        for rule in rules:
            counts = by_rule.setdefault(rule, {"changed": 0, "better": 0, "worse": 0})
            counts["changed"] += 1
            counts["better"] += up
            counts["worse"] += down
    return {
        "baseline": baseline.mode,
        "n": identical + named + len(unnamed),
        "identical": identical,
        "named": named,
        "unnamed": unnamed,
        "better": better,
        "worse": worse,
        "by_rule": by_rule,
    }


STAGES = ("hyde", "rerank")


def stages_label(mode: str, *, hyde: bool, rerank: bool) -> str:
    """A report's name: the rewrite mode and the model stages on ("rules+hyde+rerank")."""
    return "+".join([mode, *(s for s, on in zip(STAGES, (hyde, rerank), strict=True) if on)])


def task_row(
    *, task: EvalTask, plan: TurnPlan, mode: str, ks: Sequence[int], depth: int
) -> dict[str, Any]:
    """One task's JSON row: queries, decisions, term checks and retrieval metrics.

    A turn that asks back or is taken for small talk shows no sources in the product, so
    (in the modes that can decide that) a searchable task scores 0 there, and says why.
    """
    outcome, rewrite = plan.outcome, plan.outcome.rewrite
    deciding = mode in DECIDING_MODES
    clarified = deciding and plan.kind == "ask_back"
    no_search = deciding and plan.kind == "small_talk"
    queries = [] if no_search else [q.text for q in outcome.queries]
    ranked = ranked_documents(outcome.merged)[:depth]
    shown = [] if (clarified or no_search) else ranked
    row: dict[str, Any] = {
        "id": task.id,
        "mode": mode,
        "category": task.category,
        "question": task.question,
        "queries": queries,
        "searched": bool(queries),
        "small_talk": rewrite.small_talk if no_search else None,
        "clarified": clarified,
        "clarification": (
            {"question": plan.reply, "options": list(plan.options)} if clarified else None
        ),
        "decision": rewrite.decision,
        "first_turn": not task.history,
        "rules": [r.id for r in rewrite.fired],
        "policy": rewrite.policy,
        "expect_clarification": task.expect_clarification,
        "expect_no_search": task.expect_no_search,
        "ambiguous_between": sorted(task.ambiguous_between),
        "relevant": sorted(task.relevant),
        "ranked": ranked,
        "passages": [m.hit.external_id for m in outcome.passages] if shown else [],
        "terms": term_checks(queries, task.expected_queries_contain, task.queries_must_not_contain),
    }
    if task.relevant and shown is not ranked:
        row["scored_zero"] = "asked back: no sources shown" if clarified else "no search"
    if task.ambiguous_between and ranked:
        row["reached_ambiguous"] = sorted(task.ambiguous_between & set(ranked[:10]))
    for k in ks:
        row[f"recall@{k}"] = recall_at(shown, task.relevant, k)
    row["mrr@10"] = mrr_at(shown, task.relevant, 10)
    row["ndcg@10"] = ndcg_at(shown, task.relevant, 10)
    return row


async def answer_row(
    *,
    task: EvalTask,
    outcome: RetrievalOutcome,
    row: Mapping[str, Any],
    language: str,
    model: ChatModel | None,
    reference: str | None,
    lexicon: Callable[[set[str]], LexiconView] | None = None,
) -> dict[str, Any]:
    """Build the turn's answer and check it: facts found (whole and within its first 40, 80
    and 120 words), the ceiling (facts in the first one and three pages the answer could
    read), whether it says the pages hold nothing, words, reference token recall."""
    started = time.perf_counter()
    not_found, coverage, best = False, None, None
    if row["clarified"] and row["clarification"]:
        text, extractive = row["clarification"]["question"], False
    elif not row["searched"]:
        text, extractive = "", False  # small talk: a fixed polite reply, nothing to check
    else:
        answer = await turn_answer_built(
            outcome=outcome, language=language, model=model, lexicon=lexicon
        )
        text, extractive = answer.text, answer.kind != "model"
        not_found, coverage = answer.not_found, answer.coverage
        best = max((line.score for line in answer.lines), default=None)
    build_ms = (time.perf_counter() - started) * 1000
    shown = _rendered(text)
    facts = task.expected_answer_contains
    pages = page_texts(outcome) if row["passages"] else []
    return {
        "text": text,
        "not_found": not_found,
        "coverage": coverage,
        "best_line_score": best,  # the line model's score of the answer's best line
        "expect_no_answer": task.expect_no_answer,
        "extractive": extractive,
        "words": word_count(text),
        "facts": fact_checks(shown, facts),
        "facts_at": {str(n): fact_checks(first_words(shown, n), facts) for n in FACT_WORDS},
        "ceiling": {
            str(k): fact_checks(_rendered(" \n".join(pages[:k])), facts) for k in CEILING_PAGES
        },
        "token_recall": (token_recall(reference, shown) if reference is not None else None),
        "build_ms": round(build_ms, 3),
    }


def page_texts(outcome: RetrievalOutcome) -> list[str]:
    """The text the answer step reads of each found document, in the order shown."""
    pages: dict[str, list[str]] = {}
    for passage in context_passages(outcome.passages, outcome.merged):
        pages.setdefault(passage.document, []).append(
            "\n".join(t for t in (passage.title, passage.heading, passage.text) if t)
        )
    return ["\n".join(texts) for texts in pages.values()]


def _rendered(text: str) -> str:
    """The answer as the page shows it: Markdown emphasis markers are not text."""
    return _EMPHASIS.sub("", text)
