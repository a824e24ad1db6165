"""`manage.py ask`: one question through the turn's pipeline, with everything it decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.quality.datasets import EvaluationInputError, history_parse
from conversations.quality.playground import PlaygroundConfig, PlaygroundRun, playground_run
from retrieval.pipeline.retrieve import REWRITE_MODES, RetrievalSettings, RewriteMode
from retrieval.pipeline.search import Legs
from retrieval.pipeline.types import HistoryMessage

LEGS: tuple[Legs, ...] = ("hybrid", "vector", "text")
HITS_SHOWN = 5


class Command(BaseCommand):
    help = (
        "Ask one question (with an optional conversation before it) and print the rewrite, "
        "each query's hits, the sources and the answer, as a turn would produce them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question")
        parser.add_argument(
            "--history-file",
            type=Path,
            help='the conversation before it: a JSON list of {"role", "text"} or of strings '
            "alternating user/assistant (the evaluation tasks' format)",
        )
        parser.add_argument(
            "--user", help="search as this user (default: a reader of every public document)"
        )
        parser.add_argument(
            "--rewrite", choices=REWRITE_MODES, help="default: what a turn uses (settings)"
        )
        parser.add_argument("--legs", choices=LEGS, default="hybrid")
        parser.add_argument(
            "--rerank",
            action="store_true",
            help="the model orders the best fused passages (default: CHATRAG_RERANK)",
        )
        parser.add_argument(
            "--hyde",
            action="store_true",
            help="also search a hypothetical answer, vector leg only (default: CHATRAG_HYDE)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--explain",
            action="store_true",
            help="also print why the answer's lines: each one's score, page rank and the "
            "question's words it says, and the share of the question they cover",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        question = str(options["question"])
        if not question.strip():
            raise CommandError("the question is empty")
        history: tuple[HistoryMessage, ...] = ()
        if options["history_file"]:
            path: Path = options["history_file"]
            try:
                history = history_parse(path.read_text(encoding="utf-8"), where=str(path))
            except OSError as exc:
                raise CommandError(f"{path}: {exc.strerror or exc}") from exc
            except EvaluationInputError as exc:
                raise CommandError(str(exc)) from exc
        reader = None
        if options["user"]:
            reader = User.objects.filter(username=options["user"], is_active=True).first()
            if reader is None:
                raise CommandError(f"no active user {options['user']!r}")
        turn = _turn_settings()
        config = PlaygroundConfig(
            rewrite=cast(RewriteMode, options["rewrite"] or turn.mode),
            legs=cast(Legs, options["legs"]),
            rerank=bool(options["rerank"]) or turn.rerank is not None,
            hyde=bool(options["hyde"]) or turn.hyde is not None,
        )
        (run,) = playground_run(question=question, history=history, reader=reader, configs=[config])
        if options["json"]:
            self.stdout.write(json.dumps(run.to_dict(), ensure_ascii=False, indent=2))
        else:
            self.stdout.write(render_text(run, explain=bool(options["explain"])))


def _turn_settings() -> RetrievalSettings:
    """What a turn would use: its rewrite mode, and the model stages switched on."""
    from retrieval.services import retrieval_settings

    return retrieval_settings()


def _rank(value: object) -> str:
    return "–" if value is None else str(value)


def render_text(run: PlaygroundRun, *, explain: bool = False) -> str:
    """The run as the terminal shows it: [rewrite], each query's hits, sources, answer."""
    data = run.to_dict()
    rewrite = data["rewrite"]
    lines = [
        f"[rewrite] {rewrite['backend']}"
        + (f" ({rewrite['model']})" if rewrite["model"] else "")
        + f" · policy {rewrite['policy'] or '–'} · legs {data['config']['legs']}",
        f"  reader:   {data['reader']}",
        f"  original: {data['question']}",
    ]
    if data["masked_question"] != data["question"]:
        lines.append(f"  masked:   {data['masked_question']}")
    if data["window"]:
        roles = ", ".join(m["role"] for m in data["window"])
        lines.append(f"  window:   {len(data['window'])} messages ({roles})")
    if rewrite["no_search"]:
        lines.append(f"  small talk ({rewrite['small_talk'] or 'chat'}): nothing searched")
    if rewrite["topic"]:
        lines.append(f"  topic:    {rewrite['topic']}")
    if rewrite["decision"]:
        lines.append(f"  decision: {rewrite['decision']}")
    for hit in rewrite["glossary_hits"]:
        lines.append(f"  glossary: {hit['term']} → {hit['expansion']} ({hit['source']})")
    for wrong, right in rewrite["corrections"].items():
        lines.append(f"  spelling: {wrong} → {right}")
    for query in data["queries"]:
        reading = f" {query['reading']}" if query["reading"] else ""
        area = f" area={query['area']}" if query["area"] else ""
        lines.append(
            f"  → q{query['n']} {query['type']} w={query['weight']:g}{reading}{area}: "
            f"{query['text']}"
        )
        lines.append(f"       because: {query['reason']}")
    for note in rewrite["notes"]:
        lines.append(f"  note: {note}")
    for anomaly in rewrite["anomalies"]:
        lines.append(f"  anomaly: {anomaly}")
    if rewrite["clarification"]:
        clarification = rewrite["clarification"]
        lines.append(f"  clarification: {clarification['question']}")
        for option in clarification["options"]:
            lines.append(f"    option: {option}")
    if rewrite["error"]:
        lines.append(f"  rewrite error: {rewrite['error']}")
    for error in data["errors"]:
        lines.append(f"  error: {error}")
    for stage in ("hyde", "rerank"):
        if data[stage] and data[stage]["note"] not in rewrite["notes"]:
            lines.append(f"  {data[stage]['note']}")

    for query in data["queries"]:
        lines += ["", f"=== q{query['n']} {query['type']} (w {query['weight']:g}): {query['text']}"]
        if not query["hits"]:
            lines.append("  (no hits)")
            continue
        lines.append("  rank  vec  txt  score     fused       document · section")
        for hit in query["hits"][:HITS_SHOWN]:
            star = "★" if hit["passage"] else " "
            section = f" · {hit['section']}" if hit["section"] else ""
            lines.append(
                f"  {hit['rank']:>4}  {_rank(hit['vector_rank']):>3}  {_rank(hit['text_rank']):>3}"
                f"  {hit['score']:.6f}  {hit['fused']:.6f} {star} {hit['document']}{section}"
            )
    if data["reranked"]:
        lines += ["", f"=== Rerank ({data['rerank']['model']}): the top {len(data['reranked'])}"]
        lines.append("  rank  fused rank  document · section")
        for item in data["reranked"]:
            section = f" · {item['section']}" if item["section"] else ""
            lines.append(
                f"  {item['rank']:>4}  {item['fused_rank']:>10}  {item['document']}{section}"
            )
    lines += ["", "=== Sources ==="]
    if not data["sources_shown"]:
        lines.append("  (the turn shows none: it " + _why_none(data["answer"]["kind"]) + ")")
    elif not data["sources"]:
        lines.append("  (none)")
    else:
        for source in data["sources"]:
            section = f" — {source['section']}" if source["section"] else ""
            lines.append(
                f"[{source['n']}] {source['title']}{section}  "
                f"({source['document']}, chunk {source['chunk']}, fused {source['fused']:.6f})"
            )
            lines.append(f"    {source['snippet']}")
    lines += ["", f"=== Answer ({data['answer']['kind']}) ===", data["answer"]["text"], ""]
    why = data["answer"]["why"]
    if explain and why is not None:
        lines += render_why(why)
    timings = " · ".join(f"{stage} {ms:g} ms" for stage, ms in data["timings_ms"].items())
    lines.append(f"timings: {timings}")
    return "\n".join(lines)


def render_why(why: dict[str, Any]) -> list[str]:
    """Why these lines: each chosen line's score, page, the question's words it says, the
    section of its page it is in and the line model's features that weighed most."""
    verdict = "not found: the answer says so" if why["not_found"] else "answered"
    out = [f"=== Why these lines (covers {why['coverage']:.2f} of the question; {verdict}) ==="]
    out.append("  score  page  source  says · [section] line")
    for line in why["lines"]:
        says = ", ".join(line["says"]) or "–"
        section = f"[{line['section']}] " if line.get("section") else ""
        out.append(
            f"  {line['score']:>5.2f}  {line['page_rank'] + 1:>4}  [{line['n']}]     "
            f"{says} · {section}{line['text'][:100]}"
        )
        if line.get("features"):
            weighed = ", ".join(f"{name} {value:+.2f}" for name, value in line["features"])
            out.append(f"                        line model: {weighed}")
    out.append("")
    return out


def _why_none(kind: str) -> str:
    return "asks back" if kind == "clarification" else "is small talk"
