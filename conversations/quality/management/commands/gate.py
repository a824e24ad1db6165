"""`manage.py gate`: a candidate rewrite policy against the current one, in shadow, decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from conversations.quality.cases import eval_case_records
from conversations.quality.datasets import (
    EvaluationInputError,
    evaluation_collection_load,
    glossary_load,
    task_from_record,
    tasks_load,
)
from conversations.quality.gate import report_text
from conversations.quality.models import GateRun
from conversations.quality.promotion import (
    GateInputError,
    gate_run,
    policy_named,
    policy_running,
)
from retrieval.embeddings import get_embedder
from retrieval.pipeline.retrieve import REWRITE_MODES
from retrieval.services import default_collection


class Command(BaseCommand):
    help = (
        "Run a candidate rewrite policy in shadow beside the current one on judged tasks and "
        "real turns, and say whether the promotion gate lets it through."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--candidate", required=True, choices=REWRITE_MODES)
        parser.add_argument("--model", default="", help="the candidate's model (llm)")
        parser.add_argument(
            "--current",
            choices=REWRITE_MODES,
            help="compare against this policy instead of the one the chat runs now",
        )
        parser.add_argument("--current-model", default="", help="the current policy's model (llm)")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--tasks", type=Path, help="judged tasks (the evaluate format)")
        source.add_argument(
            "--cases", action="store_true", help="the active evaluation cases of the chat"
        )
        parser.add_argument("--corpus", type=Path, help="with --tasks: the corpus they judge")
        parser.add_argument("--glossary", type=Path)
        parser.add_argument(
            "--real-turns",
            type=int,
            default=None,
            help="latest real turns replayed (default CHATRAG_GATE_REAL_TURNS)",
        )
        parser.add_argument("--no-answers", action="store_true", help="skip answer-fact recall")
        parser.add_argument("--json", type=Path, dest="json_path")
        parser.add_argument("--quiet", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        real_turns = options["real_turns"]
        if real_turns is None:
            real_turns = settings.CHATRAG_GATE_REAL_TURNS
        if real_turns < 0:
            raise CommandError("--real-turns cannot be negative")
        try:
            candidate = policy_named(mode=options["candidate"], model=options["model"] or None)
            current = (
                policy_named(mode=options["current"], model=options["current_model"] or None)
                if options["current"]
                else policy_running()
            )
            if options["tasks"]:
                if options["corpus"] is None:
                    raise CommandError("--tasks needs --corpus (the documents they judge)")
                tasks = tasks_load(options["tasks"])
                collection = evaluation_collection_load(
                    corpus=options["corpus"],
                    embedder=get_embedder(),
                    glossary=glossary_load(options["glossary"]),
                ).collection
                source, label = GateRun.Source.FILE, options["tasks"].name
            else:
                if options["corpus"] or options["glossary"]:
                    raise CommandError("--cases evaluates the chat's collection and glossary")
                collection = default_collection()
                tasks = [
                    task_from_record(r, where=f"case {r['id']}")
                    for r in eval_case_records(collection=collection)
                ]
                source, label = GateRun.Source.CASES, "cases"
            bar = tqdm(total=2 * len(tasks), desc="shadow", unit="task", disable=options["quiet"])
            run, _ = gate_run(
                current=current,
                candidate=candidate,
                tasks=tasks,
                collection=collection,
                source=source,
                source_label=label,
                real_turns=real_turns,
                answers=not options["no_answers"],
                on_task=bar.update,
            )
            bar.close()
        except (EvaluationInputError, GateInputError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(report_text(run.report))
        self.stdout.write(f"kept as gate run #{run.pk} (admin: /admin/quality/gaterun/{run.pk}/)")
        if options["json_path"]:
            options["json_path"].write_text(json.dumps(run.report, ensure_ascii=False, indent=1))
            self.stdout.write(f"wrote {options['json_path']}")
