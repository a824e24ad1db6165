"""The full-text leg's cost bounds keep its hits: rows tested one by one, ts_rank_cd on a few."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, cast

import pytest
from psycopg import Connection

from retrieval.pipeline.search import (
    Scope,
    SearchParams,
    SearchRequest,
    by_row_df,
    hybrid_search,
)
from retrieval.services import scope_for_user, search_engine, search_params

pytestmark = pytest.mark.django_db(transaction=True)

QUESTIONS = (
    "quantos dias de férias eu tenho por ano",
    "vale-refeição no trabalho remoto",
    "posso pedir demissão enquanto estou de férias",
    "cuántos días de vacaciones tengo en España",
)


class _Explain:
    """Stands in for a connection: runs EXPLAIN ANALYZE on the statement hybrid_search sends."""

    def __init__(self, conn: Connection[Any]) -> None:
        self.conn = conn
        self.plan: list[str] = []

    def execute(self, sql: str, args: dict[str, Any]) -> _Explain:
        self.plan = [r[0] for r in self.conn.execute("EXPLAIN (ANALYZE) " + sql, args)]
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return []


def _text_hits(scope: Scope, params: SearchParams, text: str, share: float) -> list[int]:
    with search_engine().pool.connection() as conn:
        hits = hybrid_search(
            conn, SearchRequest(text, []), scope, params, chunk_count=100, table_share=share
        )
    return [h.chunk_id for h in hits]


def _by_row_scan_ran(scope: Scope, params: SearchParams, text: str, share: float) -> bool:
    """Whether the scan that tests rows with ts_match_vq ran (its branch is always planned)."""
    with search_engine().pool.connection() as conn:
        explain = _Explain(conn)
        hybrid_search(
            cast(Connection[Any], explain),
            SearchRequest(text, []),
            scope,
            params,
            chunk_count=100,
            table_share=share,
        )
    plan = explain.plan
    for i, line in enumerate(plan):
        if "ts_match_vq" in line and "Filter:" in line:
            node = next(plan[j] for j in range(i - 1, -1, -1) if "->" in plan[j])
            return "never executed" not in node
    raise AssertionError("no row-by-row scan in the plan:\n" + "\n".join(plan))


def test_common_words_in_a_small_share_test_rows_not_the_index(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    """A small collection in a shared table: common words skip the GIN postings of every
    collection and test the collection's rows instead; the hits are the same."""
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    params = replace(search_params(), legs="text")
    share = 0.02  # 100 chunks of a table of 5000
    assert by_row_df(params, 100, share) == 10  # words in 10+ of its chunks, summed
    assert by_row_df(params, None, share) == by_row_df(params, 100, 0.0) == 2**31 - 1
    never = replace(params, text_by_row_ratio=1e9)
    for text in QUESTIONS:
        assert _by_row_scan_ran(scope, params, text, share), text
        assert not _by_row_scan_ran(scope, never, text, share), text
        assert not _by_row_scan_ran(scope, params, text, 1.0), text  # alone: the index
        assert _text_hits(scope, params, text, share) == _text_hits(scope, never, text, share)


def test_ts_rank_cd_ranks_only_the_best_matches_by_ts_rank(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    """Fewer matches than `text_rerank`: the exact order; more: ts_rank_cd sees `text_rerank`."""
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    exact = replace(search_params(), legs="text", text_rerank=10**6)
    for text in QUESTIONS:
        assert _text_hits(scope, replace(exact, text_rerank=200), text, 1.0) == _text_hits(
            scope, exact, text, 1.0
        )
    few = replace(exact, text_rerank=1, text_candidates=2)
    with search_engine().pool.connection() as conn:
        explain = _Explain(conn)
        hybrid_search(
            cast(Connection[Any], explain),
            SearchRequest(QUESTIONS[0], []),
            scope,
            few,
            chunk_count=100,
            table_share=1.0,
        )
    # ts_rank orders the matches; the Limit above that sort passes max(text_rerank, kt) rows.
    plan = explain.plan
    passed = []
    for i, line in enumerate(plan):
        if "Sort Key: (ts_rank(" in line:
            above = [plan[j] for j in range(i - 1, -1, -1) if "->" in plan[j]]
            below = next(plan[j] for j in range(i + 1, len(plan)) if "->" in plan[j])
            passed.append((_rows(above[1]), _rows(below)))  # above[0] is the Sort itself
    assert any(out == 2 and into > 2 for out, into in passed), (passed, plan)


def _rows(node: str) -> int:
    match = re.search(r"actual time=\S+ rows=(\d+)", node)
    return int(match.group(1)) if match else -1
