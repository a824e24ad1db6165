"""Knowledge-base data: collections, documents, chunks, glossary, vocabulary, ingestion jobs."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from pgvector.django import HalfVectorField, HnswIndex, VectorField


class Collection(models.Model):
    """A knowledge base; evaluation corpora live in their own collections."""

    DEFAULT_SLUG = "company"

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    is_evaluation = models.BooleanField(default=False)
    # Which embedder produced this collection's vectors; a different model re-embeds.
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding_dim = models.PositiveIntegerField(default=0)
    # For evaluation collections: checksum of the corpus file they were built from.
    source_checksum = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    """One source document; readable by everyone unless it names groups."""

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="documents")
    # Stable identity inside the collection: a relative path ("pt/ferias.md") or a corpus id.
    external_id = models.CharField(max_length=500)
    title = models.CharField(max_length=500)
    source_path = models.CharField(max_length=1000, blank=True)
    area = models.CharField(max_length=100, blank=True)
    language = models.CharField(max_length=10, default="pt")
    groups = models.ManyToManyField(Group, blank=True, related_name="documents")
    # Versions: the date a policy takes effect, and whether a newer one replaced it (front
    # matter `effective:`, `superseded: true` or `superseded_by: <id>`, or set here by
    # staff). Search prefers current versions unless the question asks for an old one.
    effective_date = models.DateField(null=True, blank=True)
    superseded = models.BooleanField(default=False, db_default=False)
    superseded_by = models.CharField(max_length=500, blank=True, db_default="")
    checksum = models.CharField(max_length=64)
    version = models.PositiveIntegerField(default=1)
    embedding_model = models.CharField(max_length=200, blank=True)
    # How its chunks' answer lines were embedded (ChunkLine; ingestion's LINE_VECTORS_VERSION,
    # 0: none): a document unchanged since an older way gets its lines again, its chunks kept.
    lines_version = models.PositiveSmallIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["collection", "external_id"], name="document_unique_external_id"
            )
        ]

    def __str__(self) -> str:
        return self.title


class Chunk(models.Model):
    """A passage of a document, with its embedding and stored full-text vector.

    Access is denormalised onto the chunk (`is_public`, `group_ids`) so that both search
    legs filter by permission in the same index scan, without a join.
    """

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    # The table is partitioned by collection (retrieval.partitions): no index of its own.
    collection = models.ForeignKey(
        Collection, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    position = models.PositiveIntegerField()
    heading = models.CharField(max_length=1000, blank=True)
    text = models.TextField()
    embedding = VectorField(dimensions=settings.CHATRAG_EMBEDDING_DIM)
    fts_config = models.CharField(max_length=20, default="simple")
    search_vector = SearchVectorField(null=True)
    is_public = models.BooleanField(default=True)
    group_ids = ArrayField(models.IntegerField(), default=list, blank=True)
    area = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["document_id", "position"]
        indexes = [
            HnswIndex(
                name="chunk_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            GinIndex(fields=["search_vector"], name="chunk_search_vector_gin"),
            models.Index(fields=["collection", "document"], name="chunk_collection_doc"),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.position}"


class ChunkLine(models.Model):
    """One candidate answer line of a chunk (`answer.line_texts`) and its embedding.

    The extractive answer's semantic feature compares these with the turn's query vectors:
    written at ingestion, so a turn embeds nothing more. Half precision (`halfvec`): 2 bytes
    a dimension, half a `vector`'s, and the cosine moves by about 0.001. No ANN index: lines
    are read by chunk id only. The chunk's foreign key is the partitioned table's primary key
    (id, collection_id), ON DELETE CASCADE in the database (migration 0011): a replaced or
    deleted chunk takes its lines with it.
    """

    chunk = models.ForeignKey(
        Chunk,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the (chunk, position) unique index serves lookups by chunk
        related_name="lines",
    )
    collection = models.ForeignKey(
        Collection, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    position = models.PositiveIntegerField()
    text = models.TextField()  # the line's text as the answer splits it (the lookup key)
    embedding = HalfVectorField(dimensions=settings.CHATRAG_EMBEDDING_DIM)

    class Meta:
        ordering = ["chunk_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["chunk", "position"], name="chunkline_unique_position")
        ]

    def __str__(self) -> str:
        return f"{self.chunk_id}.{self.position}"


class GlossaryEntry(models.Model):
    """An internal acronym or slang term and the official words it stands for."""

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="glossary")
    term = models.CharField(max_length=100)
    expansion = models.CharField(max_length=300)
    area = models.CharField(max_length=100, blank=True)
    # The language of the turns it expands ("pt"); blank: every language. One term may have
    # an entry per language ("IRPF" is Brazil's income tax and Spain's).
    language = models.CharField(
        max_length=8,
        blank=True,
        help_text="Language of the questions this entry expands (pt, es, en); blank for all.",
    )
    active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "glossary entries"
        ordering = ["term", "language"]
        constraints = [
            models.UniqueConstraint(
                fields=["collection", "term", "language"], name="glossary_unique_term_language"
            )
        ]

    def __str__(self) -> str:
        return f"{self.term} → {self.expansion}"


class VocabularyTerm(models.Model):
    """A normalised word of a collection and in how many chunks of one group set it appears.

    Built at ingestion; used for spelling correction (pg_trgm) and term informativeness.
    Counted per document-group set (`group_ids` sorted as on the chunks; empty: public) so
    that a reader's statistics sum only the sets they may read: a word of a restricted
    document must not reach, even as a count or a correction, someone who cannot open it.
    """

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+")
    group_ids = ArrayField(models.IntegerField(), default=list, blank=True)
    word = models.CharField(max_length=100)
    df = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            # (collection, word) first: the btree also serves lookups by word.
            models.UniqueConstraint(
                fields=["collection", "word", "group_ids"], name="vocabulary_unique_word_set"
            )
        ]
        indexes = [
            GinIndex(
                OpClass(models.F("word"), name="gin_trgm_ops"),
                name="vocabulary_word_trgm",
            )
        ]

    def __str__(self) -> str:
        return f"{self.word} ({self.df})"


class VocabularyVersion(models.Model):
    """How many times a collection's vocabulary was rebuilt.

    Written only by the rebuild's own SQL (retrieval.pipeline.search.VOCABULARY_REBUILD_SQL),
    in its transaction, never by a model save that could write an older value back: word
    statistics kept between turns (retrieval.services.VocabularyLexicon) are kept for one
    version only.
    """

    collection = models.OneToOneField(
        Collection, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.collection_id}: {self.version}"


class IngestionJob(models.Model):
    """Progress of one ingestion run (command or upload task)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    paths = models.JSONField(default=list)
    # Group names given to every document of an upload (empty: the files' own front matter).
    groups = models.JSONField(default=list, blank=True)
    # A re-index job: these documents are read again from their source files and re-embedded.
    document_ids = models.JSONField(default=list, blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"ingestion {self.id} ({self.status})"
