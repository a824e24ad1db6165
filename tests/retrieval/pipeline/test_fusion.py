from __future__ import annotations

from retrieval.pipeline.fusion import Hit, cut_passages, merge_results, ranked_documents
from retrieval.pipeline.types import SearchQuery


def hit(chunk: int, doc: int, score: float = 0.03, v: int | None = 1, t: int | None = 1) -> Hit:
    return Hit(chunk, doc, f"doc-{doc}", "T", "", "text", 0, "", v, t, score)


def test_rrf_rewards_chunks_found_by_several_queries() -> None:
    queries = [SearchQuery("a", "decompose"), SearchQuery("b", "decompose")]
    results = [[hit(1, 1), hit(2, 2)], [hit(2, 2), hit(3, 3)]]
    merged = merge_results(queries, results, strategy="rrf", rrf_k=60)
    assert [m.chunk_id for m in merged] == [2, 1, 3]
    assert [(m.query, m.rank) for m in merged[0].matches] == [(0, 2), (1, 1)]
    assert merged[0].score == 1 / 62 + 1 / 61


def test_original_query_has_low_weight() -> None:
    queries = [SearchQuery("rewritten", "expand"), SearchQuery("orig", "original", weight=0.5)]
    results = [[hit(1, 1)], [hit(2, 2)]]
    merged = merge_results(queries, results)
    assert [m.chunk_id for m in merged] == [1, 2]


def test_max_strategy_keeps_each_sub_question_champion() -> None:
    queries = [SearchQuery("ferias", "decompose"), SearchQuery("demissao", "decompose")]
    # The first query's scores are all higher in absolute terms; max normalises per query.
    results = [
        [hit(1, 1, 0.033), hit(2, 1, 0.032), hit(3, 2, 0.031)],
        [hit(10, 5, 0.016), hit(11, 6, 0.010)],
    ]
    merged = merge_results(queries, results, strategy="max")
    assert {merged[0].chunk_id, merged[1].chunk_id} == {1, 10}


def test_max_strategy_puts_the_champion_the_other_queries_also_found_first() -> None:
    """Two halves of one question ("where was the cotton gin invented and where is it used
    today"): each half's champion scores 1.0; the one the other half and the user's own
    words found too comes first, whatever its chunk id."""
    queries = [
        SearchQuery("where was the cotton gin invented", "decompose"),
        SearchQuery("where is the cotton gin used today", "decompose"),
        SearchQuery("the whole message", "original", weight=0.5),
    ]
    results = [
        [hit(10, 1, 0.030), hit(90, 9, 0.020)],
        [hit(90, 9, 0.025), hit(10, 1, 0.010)],
        [hit(90, 9, 0.020), hit(10, 1, 0.005)],
    ]
    merged = merge_results(queries, results, strategy="max")
    assert [m.score for m in merged] == [1.0, 1.0]
    assert [m.chunk_id for m in merged] == [90, 10]


def test_cut_limits_chunks_per_document() -> None:
    queries = [SearchQuery("q", "normalize")]
    results = [[hit(1, 1), hit(2, 1), hit(3, 1), hit(4, 2), hit(5, 3)]]
    merged = merge_results(queries, results)
    kept = cut_passages(merged, limit=3, max_per_document=2)
    assert [k.chunk_id for k in kept] == [1, 2, 4]


def test_ranked_documents_count_each_document_once() -> None:
    queries = [SearchQuery("q", "normalize")]
    merged = merge_results(queries, [[hit(1, 1), hit(2, 1), hit(3, 2)]])
    assert ranked_documents(merged) == ["doc-1", "doc-2"]
