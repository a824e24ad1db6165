"""Evaluation corpora and tasks: load them into isolated collections and read judged tasks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from retrieval.embeddings import Embedder
from retrieval.ingestion.chunking import Section
from retrieval.ingestion.services import (
    FileOutcome,
    IngestReport,
    Progress,
    SourceDocument,
    collection_get_or_create,
    documents_ingest,
    lines_outdated,
    sources_from_paths,
    version_fields,
)
from retrieval.json_input import JSONInputError
from retrieval.json_input import json_parse as safe_json
from retrieval.models import Collection, GlossaryEntry
from retrieval.pipeline.glossary import parse_glossary_json
from retrieval.pipeline.types import GlossaryEntry as GlossaryValue
from retrieval.pipeline.types import HistoryMessage


class EvaluationInputError(Exception):
    """A corpus, tasks or glossary file is missing or malformed."""


@dataclass(frozen=True)
class EvalTask:
    """One judged turn, in the format of `../shared/data/ptes-dev` (a superset of MTRAG's)."""

    id: str
    history: tuple[HistoryMessage, ...]
    question: str
    relevant: frozenset[str]
    category: str = "all"
    expect_clarification: bool = False
    language: str | None = None
    # Small talk: the best outcome is no search at all.
    expect_no_search: bool = False
    # The documents behind the competing readings of a clarification turn.
    ambiguous_between: frozenset[str] = frozenset()
    # Diagnostics of the rewrite, matched against all the turn's queries together.
    expected_queries_contain: tuple[str, ...] = ()
    queries_must_not_contain: tuple[str, ...] = ()
    # Facts a correct answer states; () means "not annotated", not "nothing to say".
    expected_answer_contains: tuple[str, ...] = ()
    # The pages hold no answer (MTRAG-UN's unanswerable turns): the answer should say so.
    expect_no_answer: bool = False


@dataclass
class LoadedCorpus:
    collection: Collection
    reused: bool
    report: IngestReport | None = None
    errors: list[str] = field(default_factory=list)


def file_checksum(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def json_parse(text: str, *, where: str) -> object:
    """JSON that a person supplied, or EvaluationInputError (see retrieval.json_input)."""
    try:
        return safe_json(text, where=where)
    except JSONInputError as exc:
        raise EvaluationInputError(str(exc)) from exc


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    if not path.is_file():
        raise EvaluationInputError(f"{path}: no such file")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = json_parse(line, where=f"{path}:{number}")
            if not isinstance(record, dict):
                raise EvaluationInputError(f"{path}:{number}: expected a JSON object")
            yield number, record


def corpus_sources(path: Path, *, language: str | None) -> Iterator[SourceDocument | FileOutcome]:
    """Turn `{"id", "title", "text", "lang"?, "area"?, "effective"?, "superseded"?,
    "superseded_by"?}` lines into documents."""
    for number, record in _read_jsonl(path):
        doc_id, text = record.get("id"), record.get("text")
        if not isinstance(doc_id, str) or not doc_id:
            raise EvaluationInputError(f"{path}:{number}: 'id' must be a non-empty string")
        if not isinstance(text, str) or not text.strip():
            yield FileOutcome(doc_id, "error", error="empty text")
            continue
        title = record.get("title")
        lang = language or record.get("lang") or "simple"
        area = record.get("area")
        yield SourceDocument(
            external_id=doc_id,
            title=title if isinstance(title, str) else "",
            sections=(Section("", text),),
            language=str(lang),
            area=area if isinstance(area, str) else "",
            **version_fields(record),
        )


def evaluation_collection_load(
    *,
    corpus: Path,
    embedder: Embedder,
    language: str | None = None,
    glossary: Sequence[GlossaryValue] = (),
    progress: Progress | None = None,
) -> LoadedCorpus:
    """Load a corpus into its own collection, reusing it when the file has not changed."""
    if corpus.is_dir():
        # A folder of documents (e.g. demo/kb): ids are paths without suffix, as in `ingest`.
        items, _ = sources_from_paths([corpus])
        digest = hashlib.sha256()
        for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(corpus)).encode())
            digest.update(file_checksum(path).encode())
        checksum = digest.hexdigest()
        sources: Iterable[SourceDocument | FileOutcome] = items
        total = len(items)
    else:
        checksum = file_checksum(corpus)
        sources = corpus_sources(corpus, language=language)
        total = 0
    key = hashlib.sha256(f"{corpus.resolve()}|{language}".encode()).hexdigest()[:12]
    label = corpus.name if corpus.is_dir() else corpus.parent.name
    slug = f"eval-{label[:40]}-{key}".lower()
    collection = collection_get_or_create(
        slug=slug, name=f"Evaluation: {corpus}", is_evaluation=True
    )
    reused = (
        collection.source_checksum == checksum
        and collection.embedding_model == embedder.name
        # Documents stored before answer-line vectors (or an older way of them) get theirs:
        # the ingestion below embeds only those lines, every unchanged chunk kept.
        and not lines_outdated(collection=collection)
    )
    report = None
    if not reused:
        if not total:
            total = sum(1 for line in corpus.open(encoding="utf-8") if line.strip())
        report = documents_ingest(
            collection=collection,
            sources=sources,
            embedder=embedder,
            total=total,
            progress=progress,
            prune_missing=True,
        )
        collection.source_checksum = checksum
        collection.save(update_fields=["source_checksum"])
    glossary_replace(collection=collection, entries=glossary)
    return LoadedCorpus(collection=collection, reused=reused, report=report)


@transaction.atomic
def glossary_replace(*, collection: Collection, entries: Sequence[GlossaryValue]) -> None:
    """Make the collection's glossary exactly these entries (evaluation glossaries only)."""
    GlossaryEntry.objects.filter(collection=collection).delete()
    GlossaryEntry.objects.bulk_create(
        [
            GlossaryEntry(
                collection=collection,
                term=e.term,
                expansion=e.expansion,
                area=e.area or "",
                language=e.language,
            )
            for e in entries
        ]
    )


def tasks_load(path: Path) -> list[EvalTask]:
    """Read judged tasks in the project's evaluation format."""
    return [
        task_from_record(record, where=f"{path}:{number}", default_id=str(number))
        for number, record in _read_jsonl(path)
    ]


def tasks_parse(text: str, *, name: str = "tasks") -> list[EvalTask]:
    """Parse judged tasks from JSON Lines text (an uploaded file)."""
    tasks: list[EvalTask] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = json_parse(line, where=f"{name}:{number}")
        if not isinstance(record, dict):
            raise EvaluationInputError(f"{name}:{number}: expected a JSON object")
        tasks.append(task_from_record(record, where=f"{name}:{number}", default_id=str(number)))
    return tasks


def history_parse(text: str, *, where: str = "history") -> tuple[HistoryMessage, ...]:
    """A conversation in the tasks' history format, from JSON text (a file, a form field).

    A JSON list of `{"role", "text"}` or of strings alternating user/assistant; a whole task
    record (an object with a "history" list) is accepted too.
    """
    raw = json_parse(text, where=where) if text.strip() else []
    if isinstance(raw, dict):
        raw = raw.get("history") or []
    if not isinstance(raw, list):
        raise EvaluationInputError(f"{where}: expected a JSON list of messages")
    return _history(raw, where)


def _history(raw: list[object], where: str) -> tuple[HistoryMessage, ...]:
    """Messages as `{"role", "text"}` objects, or plain strings alternating user/assistant."""
    history = []
    for index, item in enumerate(raw):
        if isinstance(item, str):
            # Seed 003's format: a list of strings, the user's first.
            history.append(HistoryMessage("user" if index % 2 == 0 else "assistant", item))
            continue
        if not isinstance(item, dict) or item.get("role") not in {"user", "assistant"}:
            raise EvaluationInputError(f"{where}: bad history message")
        history.append(HistoryMessage(role=item["role"], text=str(item.get("text", ""))))
    return tuple(history)


def _strings(record: dict[str, object], key: str, where: str) -> tuple[str, ...]:
    value = record.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EvaluationInputError(f"{where}: {key!r} must be a list of strings")
    return tuple(v for v in value if v.strip())


def task_from_record(
    record: dict[str, object], *, where: str = "task", default_id: str = ""
) -> EvalTask:
    """Validate one task record (`question`, `history`, `relevant`, `category`, ...)."""
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise EvaluationInputError(f"{where}: 'question' must be a non-empty string")
    history_raw = record.get("history") or []
    relevant = record.get("relevant") or []
    if not isinstance(history_raw, list) or not isinstance(relevant, list):
        raise EvaluationInputError(f"{where}: 'history' and 'relevant' must be lists")
    category = record.get("category")
    lang = record.get("lang")
    return EvalTask(
        id=str(record.get("id", default_id or where)),
        history=_history(history_raw, where),
        question=question,
        relevant=frozenset(str(r) for r in relevant),
        category=str(category) if category else "all",
        expect_clarification=bool(record.get("expect_clarification", False)),
        language=str(lang) if lang else None,
        expect_no_search=bool(record.get("expect_no_search", False)),
        ambiguous_between=frozenset(_strings(record, "ambiguous_between", where)),
        expected_queries_contain=_strings(record, "expected_queries_contain", where),
        queries_must_not_contain=_strings(record, "queries_must_not_contain", where),
        expected_answer_contains=_strings(record, "expected_answer_contains", where),
        expect_no_answer=bool(record.get("expect_no_answer", False)),
    )


def glossary_load(path: Path | None) -> list[GlossaryValue]:
    """Read a glossary file: `{"TERM": "expansion"}` or the admin export's list form (with
    areas and languages)."""
    if path is None:
        return []
    try:
        return parse_glossary_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise EvaluationInputError(f"{path}: cannot read glossary ({exc})") from exc
    except ValueError as exc:
        raise EvaluationInputError(f"{path}: {exc}") from exc


@dataclass(frozen=True)
class DevelopmentSet:
    """A judged development set: its corpus (a JSONL file or a folder), tasks and glossary."""

    corpus: Path
    tasks: Path
    glossary: Path


def development_sets(root: Path) -> dict[str, DevelopmentSet]:
    """The judged development sets the fitting and checking scripts read, by name: the two
    of `../shared/data` beside the repository `root` and the demo's own."""
    shared = root.parent / "shared" / "data"
    sets = {
        name: DevelopmentSet(
            corpus=shared / name / "corpus.jsonl",
            tasks=shared / name / "tasks.jsonl",
            glossary=shared / name / "glossary.json",
        )
        for name in ("ptes-dev", "ptes-aurora")
    }
    sets["demo"] = DevelopmentSet(
        corpus=root / "demo" / "kb",
        tasks=root / "demo" / "eval" / "tasks.jsonl",
        glossary=root / "demo" / "glossary.json",
    )
    return sets


def development_collection_load(dev: DevelopmentSet, embedder: Embedder) -> LoadedCorpus:
    """A development set's corpus in its evaluation collection, with its glossary."""
    return evaluation_collection_load(
        corpus=dev.corpus,
        embedder=embedder,
        glossary=glossary_load(dev.glossary) if dev.glossary.exists() else (),
    )
