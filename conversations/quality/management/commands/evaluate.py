"""`manage.py evaluate`: retrieval quality on judged conversations, per rewrite mode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from tqdm import tqdm

from conversations.quality.datasets import (
    EvaluationInputError,
    evaluation_collection_load,
    glossary_load,
    tasks_load,
)
from conversations.quality.evaluate import STAGES, ModeReport, evaluate_mode, first_turns_against
from conversations.quality.scoring import CEILING_PAGES, FACT_WORDS
from retrieval.embeddings import get_embedder
from retrieval.pipeline.retrieve import REWRITE_MODES, RewriteMode
from retrieval.pipeline.tuning import DEFAULT_TUNING, TuningError, tuning_load
from retrieval.services import chat_model


def _modes(raw: str) -> list[RewriteMode]:
    modes: list[RewriteMode] = []
    for name in raw.split(","):
        name = name.strip()
        if name not in REWRITE_MODES:
            raise CommandError(
                f"unknown rewrite mode {name!r}: choose from {', '.join(REWRITE_MODES)}"
            )
        modes.append(cast(RewriteMode, name))
    return modes


def _stage_sets(raw: str | None) -> list[tuple[bool, bool] | None]:
    """`--stages none,rerank,hyde+rerank` as (hyde, rerank) pairs; None: as the settings say."""
    if raw is None:
        return [None]
    sets: list[tuple[bool, bool] | None] = []
    for item in raw.split(","):
        names = {n.strip() for n in item.split("+") if n.strip()} - {"none"}
        unknown = sorted(names - set(STAGES))
        if unknown or not item.strip():
            raise CommandError(
                f"unknown stage {', '.join(unknown) or repr(item)}: give sets like "
                "none,rerank,hyde,hyde+rerank"
            )
        sets.append(("hyde" in names, "rerank" in names))
    return sets


def _require_migrated() -> None:
    """Stop with what to do, not a traceback, on a database `migrate` has not been run on."""
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        raise CommandError(
            f"the database has {len(pending)} unapplied migration(s): run "
            "`manage.py migrate` first (`make evaluate` does)"
        )


class Command(BaseCommand):
    help = (
        "Measure recall@k, MRR@10 and nDCG@10 on judged conversations, with and without rewriting."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--corpus", type=Path, required=True)
        parser.add_argument("--tasks", type=Path, required=True)
        parser.add_argument("--glossary", type=Path)
        parser.add_argument("--lang", choices=["pt", "es", "en"])
        parser.add_argument("--k", default="5,10")
        parser.add_argument("--rewrite", default="none,last-turn,rules")
        parser.add_argument(
            "--stages",
            help="optional model stages to measure, one set per report: none, hyde, rerank, "
            "hyde+rerank (comma-separated; default: as CHATRAG_HYDE and CHATRAG_RERANK say)",
        )
        parser.add_argument(
            "--tuning",
            type=Path,
            help="a JSON object of the decisions' thresholds to change "
            "(retrieval/pipeline/tuning.py lists them); default: the product's",
        )
        parser.add_argument("--json", type=Path, dest="json_path")
        parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N tasks")
        parser.add_argument("--quiet", action="store_true")
        parser.add_argument(
            "--answers",
            action="store_true",
            help="also build each turn's answer and score the facts it contains",
        )
        parser.add_argument(
            "--corpus-idf",
            action="store_true",
            help="answers weigh words by the collection's frequencies (default: the passages')",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        _require_migrated()
        try:
            ks = sorted({int(k) for k in options["k"].split(",") if k.strip()})
        except ValueError as exc:
            raise CommandError("--k takes numbers like 5,10") from exc
        modes = _modes(options["rewrite"])
        stage_sets = _stage_sets(options["stages"])
        quiet = options["quiet"]
        try:
            tuning = tuning_load(options["tuning"]) if options["tuning"] else DEFAULT_TUNING
        except TuningError as exc:
            raise CommandError(str(exc)) from exc
        try:
            tasks = tasks_load(options["tasks"])
            glossary = glossary_load(options["glossary"])
            embedder = get_embedder()
            bar = tqdm(desc="corpus", unit="doc", disable=quiet, leave=False)

            def progress(done: int, total: int, name: str) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()

            loaded = evaluation_collection_load(
                corpus=options["corpus"],
                embedder=embedder,
                language=options["lang"],
                glossary=glossary,
                progress=progress,
            )
            bar.close()
        except EvaluationInputError as exc:
            raise CommandError(str(exc)) from exc
        if options["limit"]:
            tasks = tasks[: options["limit"]]
        if loaded.reused:
            self.stdout.write(
                f"corpus: reused collection {loaded.collection.slug} (nothing re-embedded)"
            )
        elif loaded.report:
            r = loaded.report
            self.stdout.write(
                f"corpus: {r.chunks_embedded} chunks and {r.lines_embedded} answer lines "
                f"embedded in {r.seconds:.0f}s, "
                f"{len(r.errors)} passages skipped"
            )
        model = chat_model()
        if "llm" in modes and model is None:
            self.stdout.write(
                "llm: no model server configured (CHATRAG_LLM_BACKEND): rules used instead"
            )
        if model is None and any(s and any(s) for s in stage_sets):
            self.stdout.write(
                "stages: no model server configured (CHATRAG_LLM_BACKEND): hyde and rerank "
                "are skipped (each turn's row says so)"
            )

        async def run_all() -> dict[str, ModeReport]:
            # One event loop for every mode: the model's HTTP client lives in it.
            out: dict[str, ModeReport] = {}
            for mode in modes:
                for stages in stage_sets:
                    hyde, rerank = stages if stages is not None else (None, None)
                    bar = tqdm(total=len(tasks), desc=mode, unit="task", disable=quiet, leave=False)
                    report = await evaluate_mode(
                        tasks=tasks,
                        collection=loaded.collection,
                        mode=mode,
                        ks=ks,
                        language=options["lang"],
                        model=model,
                        on_task=bar.update,
                        answers=options["answers"],
                        corpus_idf=options["corpus_idf"],
                        hyde=hyde,
                        rerank=rerank,
                        tuning=tuning,
                    )
                    out[report.mode] = report
                    bar.close()
            return out

        reports = asyncio.run(run_all())
        self.stdout.write(render_table(reports, ks))
        if options["json_path"]:
            payload = {
                "corpus": str(options["corpus"]),
                "tasks_file": str(options["tasks"]),
                "modes": {m: r.summary() for m, r in reports.items()},
                "first_turns_vs_none": first_turns_compared(reports, ks),
                "tasks": [row for r in reports.values() for row in r.rows],
            }
            options["json_path"].write_text(json.dumps(payload, ensure_ascii=False, indent=1))
            self.stdout.write(f"wrote {options['json_path']}")


def _pct(value: float | None) -> str:
    return "   -" if value is None else f"{value:.2f}"


def render_table(reports: dict[str, ModeReport], ks: list[int]) -> str:
    """Per mode: retrieval per category and language, then decisions, terms and answers."""
    cols = [f"R@{k}" for k in ks] + ["MRR@10", "nDCG@10"]
    w = max([10, *(len(mode) for mode in reports)])  # "rules+hyde+rerank" is longer
    head = f"{'mode':<{w}} {'group':<16} {'n':>4} " + " ".join(f"{c:>8}" for c in cols)
    lines = [head + f" {'exp.terms':>9} {'no-leak':>8}"]
    for mode, report in reports.items():
        summary = report.summary()
        terms = summary["query_terms"]
        groups = [("overall", summary["overall"], terms["overall"])]
        groups += [("first turns", summary["first_turns"], None)]
        groups += [(c, m, terms["by_category"][c]) for c, m in summary["by_category"].items()]
        groups += [(f"lang {lang}", m, None) for lang, m in summary["by_language"].items()]
        for name, m, t in groups:
            if not m["n"] and not (t and (t["expected"]["tasks"] or t["forbidden"]["tasks"])):
                continue
            values = [m[f"recall@{k}"] for k in ks] + [m["mrr@10"], m["ndcg@10"]]
            cells = " ".join(f"{v:>8.3f}" for v in values)
            if t:
                cells += (
                    f" {_pct(t['expected']['term_pass'] if t['expected']['terms'] else None):>9}"
                )
                cells += (
                    f" {_pct(t['forbidden']['task_pass'] if t['forbidden']['tasks'] else None):>8}"
                )
            lines.append(f"{mode:<{w}} {name[:16]:<16} {m['n']:>4} {cells}")
        clar = summary["clarification"]
        ns = summary["no_search"]
        lines.append(
            f"{mode:<{w}} clarification precision {clar['precision']:.2f} recall "
            f"{clar['recall']:.2f} (asked {clar['asked']}, expected {clar['expected']}); "
            f"small talk unsearched {_pct(ns['accuracy'])} of {ns['n']} "
            f"(searched {ns['small_talk_searched']}); false no-search {ns['false_no_search']}"
        )
        answers = summary.get("answers")
        if answers:
            a_groups = [("overall", answers["overall"])]
            a_groups += sorted(answers["by_category"].items())
            a_groups += [(f"lang {k}", v) for k, v in sorted(answers["by_language"].items())]
            lines.append(
                f"{mode:<{w}} {'answers':<16} {'n':>4} {'facts':>6} {'fact-R':>7} "
                f"{'task-R':>7} {'words':>6} {'tok-R':>6} "
                + " ".join(f"{'R@' + str(n) + 'w':>6}" for n in FACT_WORDS)
                + " "
                + " ".join(f"{'ceil' + str(k):>6}" for k in CEILING_PAGES)
            )
            for name, a in a_groups:
                if not a["n"] and a["token_recall"] is None:
                    continue
                lines.append(
                    f"{mode:<{w}} {name[:16]:<16} {a['n']:>4} {a['facts']:>6} "
                    f"{a['fact_recall']:>7.3f} {a['task_pass']:>7.3f} "
                    f"{a['median_words']:>6.0f} {_pct(a['token_recall']):>6} "
                    + " ".join(f"{_pct(a[f'facts_at_{n}']):>6}" for n in FACT_WORDS)
                    + " "
                    + " ".join(f"{_pct(a[f'ceiling_{k}']):>6}" for k in CEILING_PAGES)
                )
            nf = answers["overall"]["not_found"]
            line = f"{mode:<{w}} not found said {nf['said']}"
            if nf["expected"]:
                line += (
                    f", expected {nf['expected']}: precision {nf['precision']:.2f} "
                    f"recall {nf['recall']:.2f}"
                )
            line += (
                f"; answerable refused {nf['refused_answerable']} "
                f"(fact recall at risk {nf['fact_recall_at_risk']:.3f})"
            )
            lines.append(line)
        lat = summary["latency_ms"]
        lines.append(
            f"{mode:<{w}} latency "
            + ", ".join(f"{s} p50 {v['p50']:.1f}/p95 {v['p95']:.1f} ms" for s, v in lat.items())
        )
    lines += first_turn_lines(reports, ks)
    return "\n".join(lines)


def first_turns_compared(reports: dict[str, ModeReport], ks: list[int]) -> dict[str, Any]:
    """Each mode's first turns against the no-rewrite mode's (when both ran)."""
    baseline = reports.get("none")
    if baseline is None:
        return {}
    return {
        mode: first_turns_against(baseline, report, ks)
        for mode, report in reports.items()
        if mode != "none"
    }


def first_turn_lines(reports: dict[str, ModeReport], ks: list[int]) -> list[str]:
    """One line per mode: its first turns identical to none's, or changed by a named rule."""
    lines = []
    for mode, c in first_turns_compared(reports, ks).items():
        unnamed = c["unnamed"]
        lines.append(
            f"{mode}: first turns against none: {c['identical']} of {c['n']} identical, "
            f"{c['named']} changed by a named rule, {len(unnamed)} changed unnamed"
            + (f" ({', '.join(unnamed[:10])})" if unnamed else "")
            + f"; better {c['better']}, worse {c['worse']}"
        )
        for rule, n in sorted(c["by_rule"].items()):
            lines.append(
                f"{mode}:   {rule}: changed {n['changed']}, better {n['better']}, "
                f"worse {n['worse']}"
            )
    return lines
