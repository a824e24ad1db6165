"""Hybrid search against the real Postgres: permissions in SQL, fusion, parallel queries."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg.errors import QueryCanceled

from retrieval.embeddings import get_embedder
from retrieval.pipeline import search as search_module
from retrieval.pipeline.fusion import ranked_documents
from retrieval.pipeline.metrics import mrr_at
from retrieval.pipeline.search import (
    Scope,
    SearchCall,
    SearchCancelled,
    SearchEngine,
    SearchParams,
    SearchRequest,
    cancellable,
    fulltext_words,
)
from retrieval.services import database_conninfo, scope_for_user, search_engine, search_params

pytestmark = pytest.mark.django_db(transaction=True)

RESTRICTED_DOC = "pt/faixas-salariais-2026"


def _search(text: str, scope: Scope, params: SearchParams | None = None) -> list[str]:
    vector = get_embedder().embed_queries([text])[0]
    hits = search_engine().search(SearchRequest(text, vector), scope, params or search_params())
    return [h.external_id for h in hits]


def test_employee_never_gets_restricted_document(small_kb: Any, personas: dict[str, Any]) -> None:
    for name in ("ana", "carlos"):
        scope = scope_for_user(user=personas[name], collection=small_kb)
        for query in ("banda P3 matriz de mérito", "faixa salarial reajuste 2026", "salário"):
            assert RESTRICTED_DOC not in _search(query, scope), (name, query)


def test_group_member_gets_restricted_document(small_kb: Any, personas: dict[str, Any]) -> None:
    scope = scope_for_user(user=personas["rita"], collection=small_kb)
    assert _search("banda P3 matriz de mérito", scope)[0] == RESTRICTED_DOC


def test_scope_requires_authenticated_user(small_kb: Any) -> None:
    from django.contrib.auth.models import AnonymousUser

    with pytest.raises(PermissionError):
        scope_for_user(user=AnonymousUser(), collection=small_kb)


# Judged on the fixture slice: questions as people type them, with the document that answers.
JUDGED = [
    ("quanto é o vale-refeição por dia no escritório", "pt/vale-refeicao-regra-geral"),
    ("vale refeição para quem trabalha em casa", "pt/vale-refeicao-trabalho-remoto"),
    ("estagiário recebe vale-refeição?", "pt/vale-refeicao-estagiarios"),
    ("prazo para pedir reembolso de despesas com nota fiscal", "pt/reembolso-de-despesas"),
    ("prestador pessoa jurídica reembolso nota fiscal", "pt/reembolso-de-despesas-prestadores-pj"),
    ("quantos dias de férias eu tenho por ano", "pt/ferias-regras-gerais"),
    ("quero sair da empresa, como peço demissão", "pt/pedido-de-demissao"),
    ("posso pedir demissão enquanto estou de férias", "pt/pedido-de-demissao-durante-ferias"),
    ("política de trabalho remoto integral", "pt/trabalho-remoto-integral"),
    ("cuántos días de vacaciones tengo en España", "es/vacaciones-espana"),
    ("feriado legal en Chile", "es/vacaciones-chile"),
    ("ajuda de custo para internet em casa", "pt/trabalho-remoto-integral"),
]


def _mrr(scope: Scope, params: SearchParams) -> float:
    total = 0.0
    for question, relevant in JUDGED:
        total += mrr_at(_search(question, scope, params), {relevant}, 10)
    return total / len(JUDGED)


def test_hybrid_beats_each_leg_alone(small_kb: Any, personas: dict[str, Any]) -> None:
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    base = search_params()
    hybrid = _mrr(scope, base)
    vector_only = _mrr(scope, SearchParams(**{**base.__dict__, "text_weight": 0.0}))
    text_only = _mrr(scope, SearchParams(**{**base.__dict__, "vector_weight": 0.0}))
    print(f"MRR@10 hybrid {hybrid:.3f} vector {vector_only:.3f} text {text_only:.3f}")
    assert hybrid > vector_only
    assert hybrid > text_only


def test_text_leg_alone_answers_when_there_is_no_vector(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    hits = search_engine().search(
        SearchRequest("pedido de demissão durante as férias", []), scope, search_params()
    )
    assert hits and all(h.vector_rank is None for h in hits)
    assert hits[0].external_id.startswith("pt/pedido-de-demissao")


def test_sql_looking_text_is_just_words(small_kb: Any, personas: dict[str, Any]) -> None:
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    hostile = "férias'); DROP TABLE retrieval_chunk; -- OR 1=1 | !& <-> :*"
    assert fulltext_words(hostile) == ["férias", "drop", "table", "retrieval", "chunk", "1"]
    assert "pt/ferias-regras-gerais" in _search(hostile, scope)
    assert _search("férias", scope)  # the table is still there


def test_hits_record_their_rank_in_each_leg(small_kb: Any, personas: dict[str, Any]) -> None:
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    vector = get_embedder().embed_queries(["vale-refeição no trabalho remoto"])[0]
    hits = search_engine().search(
        SearchRequest("vale-refeição no trabalho remoto", vector), scope, search_params()
    )
    top = hits[0]
    assert top.vector_rank is not None and top.text_rank is not None
    assert top.score == pytest.approx(1 / (60 + top.vector_rank) + 1 / (60 + top.text_rank))
    assert ranked_documents  # fused list helpers are importable from the same package


def test_queries_of_a_turn_run_concurrently(
    small_kb: Any, personas: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three searches overlap in time on separate pooled connections."""
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    real = search_module.hybrid_search
    active = 0
    peak = 0
    lock = threading.Lock()
    connections: set[int] = set()

    def slow(
        conn: Any, request: SearchRequest, scope: Scope, params: SearchParams, **kwargs: Any
    ) -> Any:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
            connections.add(id(conn))
        try:
            conn.execute("SELECT pg_sleep(0.2)")  # hold the connection like a slow query
            return real(conn, request, scope, params, **kwargs)
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(search_module, "hybrid_search", slow)
    texts = ["férias", "reembolso de despesas", "vale-refeição"]
    vectors = get_embedder().embed_queries(texts)
    requests = [SearchRequest(t, v) for t, v in zip(texts, vectors, strict=True)]
    start = time.perf_counter()
    results = search_engine().search_many(requests, scope, search_params())
    elapsed = time.perf_counter() - start
    assert peak == 3 and len(connections) == 3
    assert [r[0].external_id for r in results] != [] and len(results) == 3
    print(f"three searches with a 0.2 s server-side wait each took {elapsed:.2f}s")


def test_searching_while_embedding_finds_what_one_statement_finds(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    """The full-text leg run first, then the vector leg fused with its ranks, gives the hits
    of the one-statement search: for a query with a vector, one without (a probe), one on
    the vector leg alone (a hypothetical answer), for a reader with restricted groups."""
    engine, params = search_engine(), search_params()
    texts = ["vale refeição para quem trabalha em casa", "reembolso de despesas prazo"]
    vectors = get_embedder().embed_queries(texts)
    given = [vectors[0], [], vectors[1]]
    for name in ("ana", "rita"):
        scope = scope_for_user(user=personas[name], collection=small_kb)
        requests = [
            SearchRequest(texts[0], [], area="rh"),
            SearchRequest("pedido de demissão durante as férias", []),
            SearchRequest(texts[1], [], full_text=False),
        ]
        filled = [replace(r, vector=v) for r, v in zip(requests, given, strict=True)]
        expected = engine.search_many(filled, scope, params)
        found = engine.search_while_embedding(requests, scope, params, lambda: given)
        assert found == expected and all(expected[:2]), name
        assert any(h.vector_rank and h.text_rank for h in found[0])
        assert all(h.vector_rank is None for h in found[1])
        assert all(h.text_rank is None for h in found[2])


def test_the_full_text_legs_run_while_the_queries_are_embedded(
    small_kb: Any, personas: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedder waits here until every request's full-text leg has run: were the legs
    started only once the vectors were there, it would wait in vain."""
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    real = search_module.text_leg_ranks
    done = threading.Semaphore(0)

    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        finally:
            done.release()

    monkeypatch.setattr(search_module, "text_leg_ranks", counted)
    texts = ["férias", "reembolso de despesas", "vale-refeição"]
    vectors = get_embedder().embed_queries(texts)

    def embed() -> list[list[float]]:
        ran = [done.acquire(timeout=10) for _ in texts]
        assert all(ran), "the full-text legs had not run while the embedder worked"
        return vectors

    requests = [SearchRequest(t, []) for t in texts]
    results = search_engine().search_while_embedding(requests, scope, search_params(), embed)
    filled = [SearchRequest(t, v) for t, v in zip(texts, vectors, strict=True)]
    assert results == search_engine().search_many(filled, scope, search_params())
    assert all(r and r[0].vector_rank is not None for r in results)


# --- a stopped turn cancels its statements in PostgreSQL (issue 38, finding 2) ------------------

WAIT_S = 30  # how long an awaited event may take before the test fails (never reached)


def _until(condition: Callable[[], bool]) -> None:
    """Wait for a state of the database (fails if it never comes)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the awaited state never came"
        time.sleep(0.02)


def _backend(pid: int) -> tuple[str, str | None]:
    """A backend's state and what it waits on, as pg_stat_activity shows it."""
    with psycopg.connect(database_conninfo(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT state, wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
        ).fetchone()
    assert row is not None, f"backend {pid} is gone"
    return row[0], row[1]


def _run_without_waiting_for_threads(coroutine: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run`, but closing the loop does not wait on its threads (as a web process
    goes on serving while a stopped turn's thread ends)."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(coroutine)
    finally:
        loop.close()  # shuts the default executor down without waiting


def test_a_cancelled_search_is_cancelled_in_postgres_and_its_connection_reused(
    small_kb: Any, personas: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack: a stop cancelled the turn's task, but its search SQL kept running in
    PostgreSQL, holding a pooled connection and a CPU of the database. Here the search's
    statement waits on a lock the test holds (a statement as slow as it gets); cancelling
    the task awaiting it cancels the statement (the backend is idle again while the lock is
    still held), the thread starts no statement after its embedding, and the next search
    runs on the same connection."""
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    params = search_params()
    text = "vale refeição para quem trabalha em casa"
    vector = get_embedder().embed_queries([text])[0]
    engine = SearchEngine(database_conninfo(), pool_size=1, hnsw_ef_search=40)
    try:
        warm = engine.search_many([SearchRequest(text, vector)], scope, params)  # sizes cached
        with engine.pool.connection() as conn:
            pid = conn.info.backend_pid
        started: list[int] = []
        real = search_module.hybrid_search

        def spied(*args: Any, **kwargs: Any) -> Any:
            started.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(search_module, "hybrid_search", spied)
        embedded = threading.Event()
        outcome: queue.Queue[BaseException | object] = queue.Queue()

        def embed() -> list[list[float]]:
            embedded.wait(WAIT_S)  # an embedding still under way when the stop comes
            return [vector]

        def work(call: SearchCall) -> object:
            try:
                found = engine.search_while_embedding(
                    [SearchRequest(text, [])], scope, params, embed, call=call
                )
            except BaseException as exc:
                outcome.put(exc)
                raise
            outcome.put(found)
            return found

        async def stopped() -> None:
            task = asyncio.create_task(cancellable(work))
            await asyncio.to_thread(_until, lambda: _backend(pid) == ("active", "Lock"))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        with psycopg.connect(database_conninfo()) as locker:
            locker.execute("LOCK TABLE retrieval_chunk IN ACCESS EXCLUSIVE MODE")
            _run_without_waiting_for_threads(stopped())
            # Cancelled in PostgreSQL: idle again while the lock is still held.
            _until(lambda: _backend(pid)[0] == "idle")
            embedded.set()
            ended = outcome.get(timeout=WAIT_S)
            assert isinstance(ended, SearchCancelled)
            assert isinstance(ended.__cause__, QueryCanceled)
            assert started == []  # no vector leg started after the embedding
            locker.rollback()
        # The pool's one connection, not a new one, runs the next search.
        assert engine.search_many([SearchRequest(text, vector)], scope, params) == warm
        with engine.pool.connection() as conn:
            assert conn.info.backend_pid == pid
    finally:
        engine.close()


def test_a_search_call_cancelled_before_it_starts_runs_no_statement(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    call = SearchCall()
    call.cancel()
    with pytest.raises(SearchCancelled):
        search_engine().search_many(
            [SearchRequest("férias", [])], scope, search_params(), call=call
        )
    assert call.cancels_sent == 0


def test_the_text_leg_weighs_a_rare_word_above_common_ones(personas: dict[str, Any]) -> None:
    # Postgres ranks matches with no notion of rarity: pages full of the question's common
    # words ("colaborador", "empresa", "dias") outranked the one page holding its rare words.
    # Each matched word now counts by its idf in the collection's vocabulary.
    from retrieval.ingestion.chunking import Section
    from retrieval.ingestion.services import SourceDocument, documents_ingest
    from retrieval.services import default_collection

    common = (
        "O colaborador da empresa tem dias de folga. O colaborador da empresa conta os dias "
        "no portal. A empresa avisa o colaborador dos dias com antecedência."
    )
    docs = [
        SourceDocument(f"pt/rotina-{i}", f"Rotina {i}", (Section("", common),), language="pt")
        for i in range(5)
    ] + [
        SourceDocument(
            "pt/nota-de-debito",
            "Prestadores",
            (Section("", "A nota de débito do prestador segue para o financeiro."),),
            language="pt",
        )
    ]
    collection = default_collection()
    documents_ingest(collection=collection, sources=docs, embedder=get_embedder(), total=6)
    scope = scope_for_user(user=personas["ana"], collection=collection)
    question = "o colaborador da empresa tem quantos dias para a nota de débito?"
    assert _search(question, scope, SearchParams(legs="text"))[0] == "pt/nota-de-debito"


def test_the_text_leg_tests_only_the_configurations_the_collection_uses(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    """Each configuration's test reads the whole GIN index: a Portuguese and Spanish
    collection's searches leave English and `simple` out, and find the same chunks. A
    document in a language new to the collection is searched by its words once the engine
    reads the collection's languages again (within a minute)."""
    from retrieval.ingestion.chunking import Section
    from retrieval.ingestion.services import SourceDocument, documents_ingest

    engine, params = search_engine(), SearchParams(legs="text")
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    used = engine.collection_configs(small_kb.id, max_age=0)
    assert used == ("portuguese", "spanish")
    count, share = engine.collection_size(small_kb.id)
    with engine.pool.connection() as conn:
        for question, relevant in JUDGED:
            found = [
                search_module.hybrid_search(
                    conn,
                    SearchRequest(question, []),
                    scope,
                    params,
                    chunk_count=count,
                    table_share=share,
                    configs=configs,
                )
                for configs in (search_module.ALL_CONFIGS, used)
            ]
            assert found[0] == found[1], question
            assert relevant in [h.external_id for h in found[1]], question

    documents_ingest(
        collection=small_kb,
        sources=[
            SourceDocument(
                "en/parking",
                "Parking",
                (Section("", "Employees park in the garage on level two with their badge."),),
                language="en",
            )
        ],
        embedder=get_embedder(),
        total=1,
    )
    question = SearchRequest("where do employees park", [])
    with engine.pool.connection() as conn:
        stale = search_module.hybrid_search(conn, question, scope, params, configs=used)
    assert "en/parking" not in [h.external_id for h in stale]
    assert engine.collection_configs(small_kb.id, max_age=0) == (
        "portuguese",
        "spanish",
        "english",
    )
    assert [h.external_id for h in engine.search(question, scope, params)][:1] == ["en/parking"]
