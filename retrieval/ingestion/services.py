"""Ingestion services: files or corpus records in, documents with embedded chunks out.

- Idempotent: a document whose content, metadata, embedder and chunking are unchanged is
  skipped by checksum; a changed one has its chunks replaced in one transaction.
- Embeddings are computed in batches that span documents (many small passages are common),
  before the write transaction, so a failing embedder never leaves a half-written document.
  With the local engine (it counts its own tokens) a window of passages is sorted by token
  length and embedded in batches of similar length, the vectors put back in order.
- Embedding one file's passages may take CHATRAG_INGEST_FILE_SECONDS: a file still being
  embedded then is reported failed and not stored, and the run goes on with the next file.
- An embedder that fails is down for the whole run: the documents already written stay (each
  is complete), the rest are reported as not ingested without trying, and the report says
  why; running again once the embedder is back does only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from itertools import accumulate
from pathlib import Path
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import IntegrityError, connection, transaction

from retrieval.embeddings import Embedder, EmbeddingError
from retrieval.models import Chunk, ChunkLine, Collection, Document
from retrieval.partitions import partition_analyze, partition_ensure
from retrieval.pipeline.answer import Passage, line_texts
from retrieval.pipeline.search import (
    VOCABULARY_REBUILD_SQL,
    text_search_config_for,
    unit_vector,
)
from retrieval.services import default_language

from .chunking import ChunkDraft, Section, chunk_sections, embedded_context
from .parsers import (
    SUPPORTED_SUFFIXES,
    ParsedDocument,
    ParseError,
    ParseLimits,
    parse_file_isolated,
    parse_files_isolated,
)

CHUNKER_VERSION = "1"
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class SourceDocument:
    """A document ready to chunk: from a parsed file or a corpus record."""

    external_id: str
    title: str
    sections: tuple[Section, ...]
    language: str = field(default_factory=default_language)
    area: str = ""
    groups: tuple[str, ...] = ()
    source_path: str = ""
    effective_date: date | None = None
    superseded: bool = False
    superseded_by: str = ""


@dataclass
class FileOutcome:
    external_id: str
    status: str  # added | updated | unchanged | removed | error
    chunks: int = 0
    error: str = ""


@dataclass
class IngestReport:
    outcomes: list[FileOutcome] = field(default_factory=list)
    chunks_embedded: int = 0
    lines_embedded: int = 0  # answer lines (ChunkLine), embedded with the chunks
    embed_seconds: float = 0.0
    seconds: float = 0.0
    embedder_error: str = ""  # set when the embedder failed and the run stopped embedding

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def errors(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == "error"]

    def as_dict(self) -> dict[str, object]:
        return {
            "added": self.count("added"),
            "updated": self.count("updated"),
            "unchanged": self.count("unchanged"),
            "removed": self.count("removed"),
            "errors": [{"document": o.external_id, "error": o.error} for o in self.errors],
            "chunks_embedded": self.chunks_embedded,
            "lines_embedded": self.lines_embedded,
            "embed_seconds": round(self.embed_seconds, 2),
            "seconds": round(self.seconds, 2),
            **({"embedder_error": self.embedder_error} if self.embedder_error else {}),
        }


def collection_get_or_create(*, slug: str, name: str, is_evaluation: bool = False) -> Collection:
    """Return the collection with this slug, creating it if needed."""
    collection, _ = Collection.objects.get_or_create(
        slug=slug, defaults={"name": name, "is_evaluation": is_evaluation}
    )
    return collection


@transaction.atomic
def chunk_partition_ensure(*, collection: Collection) -> bool:
    """Give the collection its chunks' partition before any is written (its search then reads
    its own indexes only); True if made now. Idempotent, and safe between concurrent workers
    (retrieval.partitions)."""
    with connection.cursor() as cursor:
        return partition_ensure(cursor, collection.pk)


def parse_limits() -> ParseLimits:
    """What reading one file may cost, from settings."""
    return ParseLimits(
        max_chars=settings.CHATRAG_PARSE_MAX_CHARS,
        seconds=settings.CHATRAG_PARSE_SECONDS,
        memory_mb=settings.CHATRAG_PARSE_MEMORY_MB,
    )


def source_from_file(path: Path, *, root: Path) -> SourceDocument:
    """Parse one file; its id is its path below `root` without the suffix."""
    parsed = parse_file_isolated(
        path, max_bytes=settings.CHATRAG_MAX_UPLOAD_MB * 1_000_000, limits=parse_limits()
    )
    return _source(parsed, path, root=root)


def _source(parsed: ParsedDocument, path: Path, *, root: Path) -> SourceDocument:
    relative = path.relative_to(root) if path.is_relative_to(root) else Path(path.name)
    meta = parsed.metadata
    groups = tuple(g.strip() for g in meta.get("groups", "").split(",") if g.strip())
    return SourceDocument(
        external_id=str(relative.with_suffix("")),
        title=parsed.title,
        sections=tuple(parsed.sections),
        language=meta.get("lang", "") or _guess_language(parsed.text),
        area=meta.get("area", ""),
        groups=groups,
        source_path=str(path),
        **version_fields(meta),
    )


_TRUE = frozenset({"true", "yes", "sim", "si", "sí", "1"})


def version_fields(meta: Mapping[str, object]) -> dict[str, Any]:
    """Read `effective`, `superseded` and `superseded_by` from front matter or a record.

    A date that does not parse is left out rather than failing the whole document.
    """
    effective = str(meta.get("effective") or meta.get("effective_date") or "").strip()
    try:
        effective_date = date.fromisoformat(effective[:10]) if effective else None
    except ValueError:
        effective_date = None
    superseded_by = str(meta.get("superseded_by") or "").strip()[:500]
    flag = meta.get("superseded")
    superseded = bool(superseded_by) or flag is True or str(flag).strip().lower() in _TRUE
    return {
        "effective_date": effective_date,
        "superseded": superseded,
        "superseded_by": superseded_by,
    }


# Enough words for the stopword counts to settle; a document of one language says which in
# its opening pages. The whole text cost the worker 0.7-1.5 s for 250,000 characters and grew
# with it (the parse child's limits do not cover this step): a 5 MB text file spent tens of
# seconds here before the passage limit refused it.
LANGUAGE_SAMPLE_CHARS = 20_000


def _guess_language(text: str) -> str:
    from retrieval.pipeline.text import detect_language

    sample = text[:LANGUAGE_SAMPLE_CHARS]
    if len(text) > LANGUAGE_SAMPLE_CHARS and " " in sample:
        sample = sample[: sample.rfind(" ")]  # not half a word
    return detect_language(sample) or default_language()


def iter_files(paths: Iterable[Path]) -> tuple[list[tuple[Path, Path]], list[FileOutcome]]:
    """Expand folders into (file, root) pairs; name missing or unsupported paths as errors."""
    files: list[tuple[Path, Path]] = []
    errors: list[FileOutcome] = []
    for raw in paths:
        path = raw.resolve()
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and not child.name.startswith("."):
                    if child.suffix.lower() in SUPPORTED_SUFFIXES:
                        files.append((child, path))
                    else:
                        errors.append(
                            FileOutcome(str(child), "error", error="unsupported file type")
                        )
        elif path.is_file():
            files.append((path, path.parent))
        else:
            errors.append(FileOutcome(str(raw), "error", error="no such file or folder"))
    return files, errors


def _checksum(source: SourceDocument, embedder: Embedder) -> str:
    payload = {
        "title": source.title,
        "sections": [[s.heading, s.text] for s in source.sections],
        "language": source.language,
        "area": source.area,
        "groups": sorted(source.groups),
        "embedder": embedder.name,
        "chunker": [CHUNKER_VERSION, settings.CHATRAG_CHUNK_CHARS, settings.CHATRAG_CHUNK_OVERLAP],
    }
    # Versions count only when set, so that documents without them keep their checksums
    # (and are not re-embedded) when these fields appeared.
    if source.effective_date or source.superseded:
        payload["version"] = [
            str(source.effective_date or ""),
            source.superseded,
            source.superseded_by,
        ]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()


def embedding_text(title: str, heading: str, text: str) -> str:
    """What is embedded for a chunk: its text with the title and heading as context.

    The context is cut to the embedded bounds (`embedded_context`), tighter than the stored
    ones: it is embedded again with every passage (issue 38, finding 1).
    """
    context = embedded_context(title, heading)
    return f"{context}\n{text}" if context else text


def _format_clash(
    source: SourceDocument, current: Document | None, sources_of: Mapping[str, str]
) -> str:
    """Why this file may not take its id ("" if it may), issue 38, finding 7.

    A document's id is its path without the suffix, so x.md, x.html, x.docx and x.pdf had
    one id and overwrote each other ("added 1 updated 3", only the last kept, no warning).
    The ids stay as they are (links, evaluation sets and re-indexes use them): the second
    format of one name is refused, saying which file holds the name. A new version of the
    same file (same format) replaces it as before.
    """
    name = Path(source.source_path).name
    earlier = sources_of.get(source.external_id)
    if earlier is not None:
        return (
            f"same name as {Path(earlier).name} in this upload: a document's id is its file "
            f"name without the extension, so {name} would replace it; rename one of them"
        )
    if current is not None and current.source_path and source.source_path:
        held = Path(current.source_path).suffix.lower()
        if held != Path(source.source_path).suffix.lower():
            return (
                f"the document {source.external_id!r} already comes from a {held or 'text'} "
                f"file ({Path(current.source_path).name}); {name} would replace it: rename "
                f"it, or delete that document first"
            )
    return ""


@dataclass
class _Pending:
    source: SourceDocument
    checksum: str
    existing: Document | None
    drafts: list[ChunkDraft]
    vectors: list[list[float]] = field(default_factory=list)
    # Each draft's answer lines (`chunk_line_texts`) and, once embedded, their vectors in
    # the same order, all drafts' after one another.
    lines: list[list[str]] = field(default_factory=list)
    line_vectors: list[list[float]] = field(default_factory=list)
    # An unchanged document stored before line vectors existed: only its lines are embedded
    # and written (`chunks` are its stored chunks' ids, in the drafts' order).
    backfill: bool = False
    chunks: list[int] = field(default_factory=list)

    def texts(self) -> list[str]:
        """What is embedded for this document: its passages (unless only its lines are
        missing), then its lines, each cut to CHATRAG_LINE_VECTOR_CHARS, with the same
        title and heading context as its chunk (`line_embedding_text`)."""
        title = self.source.title
        passages = (
            [] if self.backfill else [embedding_text(title, d.heading, d.text) for d in self.drafts]
        )
        lines = [
            line_embedding_text(title, draft.heading, text)
            for draft, texts in zip(self.drafts, self.lines, strict=False)
            for text in texts
        ]
        return passages + lines


# How lines are embedded; a document stored with another (Document.lines_version) gets its
# lines again at the next run, its chunks kept. 1: each line after its title and heading.
LINE_VECTORS_VERSION = 1


def line_embedding_text(title: str, heading: str, line: str) -> str:
    """What is embedded for an answer line: the line, cut to CHATRAG_LINE_VECTOR_CHARS,
    after its page title and section heading as its chunk has them (`embedding_text`).

    A line alone is often a fragment of its section ("Sim, com 30 dias de aviso."): with its
    context, the line holding a judged fact was the similarity's first of its turn's
    candidate lines .468 of the time on ptes-dev (.355 alone) and .383 on ptes-aurora
    (.133), scripts/measure_line_similarity.py --context; the context is bounded as the
    chunk's is (`embedded_context`).
    """
    return embedding_text(title, heading, line[: settings.CHATRAG_LINE_VECTOR_CHARS])


def chunk_line_texts(source: SourceDocument, draft: ChunkDraft) -> list[str]:
    """The answer lines of one chunk whose vectors are stored: the very lines the answer
    scores (`answer.line_texts`), the first CHATRAG_LINE_VECTORS_PER_CHUNK of them."""
    passage = Passage(
        0,
        source.title[:500],
        draft.heading[:1000],
        draft.text,
        source.external_id,
        draft.position,
        source.language,
    )
    texts = line_texts(passage, source.language)
    return texts[: settings.CHATRAG_LINE_VECTORS_PER_CHUNK]


# The clock of the per-file embedding limit (a test moves it instead of waiting).
_clock = time.monotonic


def _embed_batch(
    batch: list[_Pending], embedder: Embedder, *, size: int, seconds: float
) -> set[int]:
    """Embed the batch's passages `size` at a time into each pending document's `vectors`;
    return the positions in the batch of the documents cut off by the per-file limit.

    A document whose passages are still being embedded `seconds` after its first call began
    (0: no limit) is dropped (its other passages are not embedded) and the batch goes on with
    the next document: one slow file holds the worker for about `seconds` and a call at most
    (issue 38: an upload held a worker for 24 minutes), and the files after it are still done.
    """
    per_document = [p.texts() for p in batch]
    texts = [text for own in per_document for text in own]
    owner = [i for i, own in enumerate(per_document) for _ in own]
    ends = list(accumulate(len(own) for own in per_document))  # each document's texts end here
    vectors: list[list[float]] = [[] for _ in texts]
    started: dict[int, float] = {}
    late: set[int] = set()
    position = 0
    while position < len(texts):
        stop = position + size
        # The rest in this call when it is less than another `size` (a batch is flushed once it
        # holds `size` passages or more: one call, as before the limit, unless it is long).
        piece = slice(position, len(texts) if len(texts) - stop < size else stop)
        now = _clock()
        for index in set(owner[piece]):
            started.setdefault(index, now)
        got = embedder.embed_passages(texts[piece])
        if len(got) != piece.stop - piece.start:
            raise EmbeddingError(f"{len(got)} vectors for {piece.stop - piece.start} passages")
        vectors[piece] = got
        position = piece.stop
        if not seconds or position >= len(texts):
            continue
        current = owner[position]  # the next text's document, embedded in part or not yet
        if current in started and _clock() - started[current] > seconds:
            late.add(current)
            position = ends[current]
    for index, p in enumerate(batch):
        if index in late:
            p.vectors, p.line_vectors = [], []
            continue
        own = vectors[ends[index] - len(per_document[index]) : ends[index]]
        passages = 0 if p.backfill else len(p.drafts)
        p.vectors, p.line_vectors = own[:passages], own[passages:]
    return late


def documents_ingest(
    *,
    collection: Collection,
    sources: Iterable[SourceDocument | FileOutcome],
    embedder: Embedder,
    total: int = 0,
    progress: Progress | None = None,
    prune_missing: bool = False,
    prune_under: Sequence[Path] = (),
    rebuild_vocabulary: bool = True,
) -> IngestReport:
    """Ingest documents into a collection (FileOutcome items are pre-recorded errors).

    `prune_missing` removes every document of the collection not in `sources` (a corpus that
    is the whole collection). `prune_under` removes only documents whose source file lay in
    one of these folders and is gone: a folder's deleted files, never a document that came
    from elsewhere (an upload through the admin). `rebuild_vocabulary=False` leaves the
    collection's vocabulary to the caller (a part of a split job: the last part rebuilds it).
    """
    started = time.perf_counter()
    report = IngestReport()
    batch: list[_Pending] = []
    batch_chunks = 0
    seen: set[str] = set()
    done = 0
    sources_of: dict[str, str] = {}  # id -> the source file that gave it in this run
    # A new embedding model changes every checksum, so every document is re-embedded below;
    # until then search keeps the vector leg off (retrieval.services.query_embedder_for).
    existing = {d.external_id: d for d in Document.objects.filter(collection=collection)}
    size = settings.CHATRAG_EMBEDDING_BATCH
    file_seconds = settings.CHATRAG_INGEST_FILE_SECONDS
    lines_on = settings.CHATRAG_LINE_VECTORS
    chunk_partition_ensure(collection=collection)

    def flush() -> None:
        nonlocal batch, batch_chunks
        if not batch:
            return
        t0 = time.perf_counter()
        try:
            late = _embed_batch(batch, embedder, size=size, seconds=file_seconds)
        except EmbeddingError as exc:
            report.embedder_error = str(exc)
            for p in batch:
                # A stored document whose lines failed is still whole: unchanged, lines next run.
                failed = FileOutcome(p.source.external_id, "error", error=str(exc))
                report.outcomes.append(_unchanged(p) if p.backfill else failed)
            batch, batch_chunks = [], 0
            return
        report.embed_seconds += time.perf_counter() - t0
        report.chunks_embedded += sum(len(p.vectors) for p in batch)
        report.lines_embedded += sum(len(p.line_vectors) for p in batch)
        for index, p in enumerate(batch):
            if p.backfill:
                if index not in late:
                    _write_lines(collection, p)
                report.outcomes.append(_unchanged(p))
                continue
            if index in late:
                error = (
                    f"took more than {file_seconds:g} s to embed "
                    f"(CHATRAG_INGEST_FILE_SECONDS): not stored; split the document"
                )
                report.outcomes.append(FileOutcome(p.source.external_id, "error", error=error))
                continue
            _write_document(collection, p, embedder)
            status = "updated" if p.existing else "added"
            report.outcomes.append(FileOutcome(p.source.external_id, status, len(p.drafts)))
        batch, batch_chunks = [], 0

    for item in sources:
        done += 1
        if isinstance(item, FileOutcome):
            report.outcomes.append(item)
            if progress:
                progress(done, total, item.external_id)
            continue
        clash = _format_clash(item, existing.get(item.external_id), sources_of)
        if clash:
            report.outcomes.append(FileOutcome(item.external_id, "error", error=clash))
            if progress:
                progress(done, total, item.external_id)
            continue
        seen.add(item.external_id)
        sources_of[item.external_id] = item.source_path
        checksum = _checksum(item, embedder)
        current = existing.get(item.external_id)
        if report.embedder_error and (current is None or current.checksum != checksum):
            error = f"not ingested: the embedder failed ({report.embedder_error})"
            report.outcomes.append(FileOutcome(item.external_id, "error", error=error))
        elif current is not None and current.checksum == checksum:
            stored = _without_lines(current) if lines_on else None
            if stored is None:
                report.outcomes.append(FileOutcome(item.external_id, "unchanged"))
            else:  # stored before line vectors existed: its lines are embedded now
                batch.append(stored)
                batch_chunks += sum(len(lines) for lines in stored.lines)
                if batch_chunks >= size:
                    flush()
        else:
            drafts = chunk_sections(
                list(item.sections),
                max_chars=settings.CHATRAG_CHUNK_CHARS,
                overlap=settings.CHATRAG_CHUNK_OVERLAP,
            )
            limit = settings.CHATRAG_MAX_PASSAGES_PER_DOCUMENT
            if not drafts:
                report.outcomes.append(FileOutcome(item.external_id, "error", error="no text"))
            elif limit and len(drafts) > limit:
                error = (
                    f"too long: {len(drafts)} passages, more than "
                    f"CHATRAG_MAX_PASSAGES_PER_DOCUMENT ({limit}); split the document"
                )
                report.outcomes.append(FileOutcome(item.external_id, "error", error=error))
            else:
                lines = [chunk_line_texts(item, d) for d in drafts] if lines_on else []
                batch.append(_Pending(item, checksum, current, drafts, lines=lines))
                batch_chunks += len(drafts) + sum(len(texts) for texts in lines)
                if batch_chunks >= size:
                    flush()
        if progress:
            progress(done, total, item.external_id)
    flush()

    roots = [root.resolve() for root in prune_under]
    if prune_missing or roots:
        for external_id, document in existing.items():
            if external_id in seen:
                continue
            if not prune_missing and not _deleted_file_under(document.source_path, roots):
                continue
            document.delete()
            report.outcomes.append(FileOutcome(external_id, "removed"))

    changed = any(o.status in {"added", "updated", "removed"} for o in report.outcomes)
    if changed or not collection.embedding_model:
        collection.embedding_model = embedder.name
        collection.embedding_dim = embedder.dim
        collection.save(update_fields=["embedding_model", "embedding_dim"])
        if changed and rebuild_vocabulary:
            vocabulary_rebuild(collection=collection)
    report.seconds = time.perf_counter() - started
    return report


def lines_outdated(*, collection: Collection) -> bool:
    """Whether some document of the collection lacks its answer lines the current way (and
    line vectors are on): its next ingestion run embeds them."""
    return settings.CHATRAG_LINE_VECTORS and (
        Document.objects.filter(collection=collection)
        .exclude(lines_version=LINE_VECTORS_VERSION)
        .exists()
    )


def _unchanged(pending: _Pending) -> FileOutcome:
    return FileOutcome(pending.source.external_id, "unchanged")


def _without_lines(document: Document) -> _Pending | None:
    """An unchanged document's stored chunks, with their lines to embed, when its lines were
    not embedded the current way (stored before line vectors, or with an older
    LINE_VECTORS_VERSION); None when they were."""
    if document.lines_version == LINE_VECTORS_VERSION:
        return None
    source = SourceDocument(
        external_id=document.external_id,
        title=document.title,
        sections=(),
        language=document.language,
    )
    chunks = list(
        Chunk.objects.filter(collection_id=document.collection_id, document=document)
        .order_by("position")
        .values_list("id", "position", "heading", "text")
    )
    drafts = [ChunkDraft(position, heading, text) for _, position, heading, text in chunks]
    lines = [chunk_line_texts(source, d) for d in drafts]
    return _Pending(
        source,
        document.checksum,
        document,
        drafts,
        lines=lines,
        backfill=True,
        chunks=[chunk_id for chunk_id, *_ in chunks],
    )


def _line_rows(
    collection: Collection, pending: _Pending, chunk_ids: Sequence[int]
) -> list[ChunkLine]:
    """The documents' line rows, their vectors scaled to length 1 (the answer's cosine is a
    dot product)."""
    vectors = iter(pending.line_vectors)
    return [
        ChunkLine(
            chunk_id=chunk_id,
            collection=collection,
            position=position,
            text=text,
            embedding=list(unit_vector(next(vectors))),
        )
        for chunk_id, texts in zip(chunk_ids, pending.lines, strict=True)
        for position, text in enumerate(texts)
    ]


@transaction.atomic
def _write_lines(collection: Collection, pending: _Pending) -> None:
    """Store an unchanged document's line vectors (its chunks stay as they are)."""
    ChunkLine.objects.filter(collection=collection, chunk_id__in=pending.chunks).delete()
    ChunkLine.objects.bulk_create(_line_rows(collection, pending, pending.chunks))
    assert pending.existing is not None  # a backfill is of a stored document
    Document.objects.filter(pk=pending.existing.pk).update(lines_version=LINE_VECTORS_VERSION)


def _deleted_file_under(source_path: str, roots: Sequence[Path]) -> bool:
    """Whether a document's source file was in one of `roots` and no longer exists."""
    if not source_path:
        return False
    path = Path(source_path).resolve()
    return any(path.is_relative_to(root) for root in roots) and not path.exists()


def _groups(names: Sequence[str]) -> list[Group]:
    return [Group.objects.get_or_create(name=name)[0] for name in names]


@transaction.atomic
def _write_document(collection: Collection, pending: _Pending, embedder: Embedder) -> Document:
    """Create or replace one document and all its chunks atomically."""
    source = pending.source
    groups = _groups(source.groups)
    fields = {
        "title": source.title[:500],
        "source_path": source.source_path[:1000],
        "area": source.area,
        "language": source.language,
        "checksum": pending.checksum,
        "embedding_model": embedder.name,
        "lines_version": LINE_VECTORS_VERSION if settings.CHATRAG_LINE_VECTORS else 0,
        "effective_date": source.effective_date,
        "superseded": source.superseded,
        "superseded_by": source.superseded_by,
    }
    document = pending.existing
    if document is None:
        try:
            with transaction.atomic():  # a savepoint: the insert may lose a race
                document = Document.objects.create(
                    collection=collection, external_id=source.external_id, **fields
                )
        except IntegrityError:
            # Another task wrote it since this one looked (a retry beside the part it retries,
            # two jobs on one folder): replace that one, the same way as a changed document.
            document = Document.objects.select_for_update().get(
                collection=collection, external_id=source.external_id
            )
            pending.existing = document
    if pending.existing is not None:
        for key, value in fields.items():
            setattr(document, key, value)
        document.version += 1
        document.save()
        # The collection names the partition: the delete reads one table's index, not each's.
        Chunk.objects.filter(collection=collection, document=document).delete()
    document.groups.set(groups)
    group_ids = [g.id for g in groups]
    config = text_search_config_for(source.language)
    chunks = Chunk.objects.bulk_create(
        [
            Chunk(
                document=document,
                collection=collection,
                position=draft.position,
                heading=draft.heading[:1000],
                text=draft.text,
                embedding=vector,
                fts_config=config,
                is_public=not group_ids,
                group_ids=group_ids,
                area=source.area,
            )
            for draft, vector in zip(pending.drafts, pending.vectors, strict=True)
        ]
    )
    if pending.lines:  # the old chunks' lines went with them (ON DELETE CASCADE)
        ChunkLine.objects.bulk_create(_line_rows(collection, pending, [c.pk for c in chunks]))
    with connection.cursor() as cursor:
        # Title and heading weigh more than body text; unaccent so "ferias" finds "férias".
        cursor.execute(
            """
            UPDATE retrieval_chunk SET search_vector =
                setweight(to_tsvector(fts_config::regconfig, unaccent(%s)), 'A')
                || setweight(to_tsvector(fts_config::regconfig, unaccent(heading)), 'B')
                || to_tsvector(fts_config::regconfig, unaccent(text))
            WHERE collection_id = %s AND document_id = %s
            """,
            [document.title, collection.pk, document.id],
        )
    return document


def document_set_groups(*, document: Document, group_names: Sequence[str]) -> None:
    """Change who may read a document, keeping its chunks' access columns in step."""
    with transaction.atomic():
        groups = _groups(group_names)
        document.groups.set(groups)
        ids = sorted(g.id for g in groups)
        Chunk.objects.filter(collection_id=document.collection_id, document=document).update(
            is_public=not ids, group_ids=ids
        )
        # The vocabulary is counted per group set: the document's words change set too.
        vocabulary_rebuild(collection=document.collection)


@transaction.atomic
def vocabulary_rebuild(*, collection: Collection) -> int:
    """Recount the collection's words (accent-free, lower case) and their chunk frequency,
    and refresh the planner's statistics of its chunks' partition (after the same changes)."""
    with connection.cursor() as cursor:
        for statement in VOCABULARY_REBUILD_SQL:  # the delete, the version, then the insert
            cursor.execute(statement, {"collection": collection.id})
        words = cursor.rowcount
        partition_analyze(cursor, collection.pk)
        return words


def sources_from_paths(
    paths: Sequence[Path], *, on_file: Callable[[Path], object] | None = None
) -> tuple[list[SourceDocument | FileOutcome], int]:
    """Parse files lazily-enough for progress: returns items (errors included) and a count.

    `on_file` hears each file before it is read (a job records it: a worker that dies then
    was most likely killed by that file, and the job is not run again).
    """
    files, errors = iter_files(paths)
    items: list[SourceDocument | FileOutcome] = list(errors)
    items += sources_from_files(files, on_file=on_file)
    return items, len(items)


def sources_from_files(
    files: Sequence[tuple[Path, Path]], *, on_file: Callable[[Path], object] | None = None
) -> list[SourceDocument | FileOutcome]:
    """Parse (file, root) pairs from `iter_files`; a file that fails is an error outcome."""
    items: list[SourceDocument | FileOutcome] = []
    parsed_files = parse_files_isolated(
        [path for path, _ in files],
        max_bytes=settings.CHATRAG_MAX_UPLOAD_MB * 1_000_000,
        limits=parse_limits(),
        on_file=on_file,
    )
    for (path, root), (_, parsed) in zip(files, parsed_files, strict=True):
        if isinstance(parsed, ParseError):
            items.append(FileOutcome(str(path), "error", error=str(parsed)))
            continue
        try:
            items.append(_source(parsed, path, root=root))
        except SoftTimeLimitExceeded:  # the task's time is up (jobs.py), not this file's fault
            raise
        except Exception as exc:  # odd metadata must not stop the rest
            error = f"unreadable ({exc.__class__.__name__})"
            items.append(FileOutcome(str(path), "error", error=error))
    return items
