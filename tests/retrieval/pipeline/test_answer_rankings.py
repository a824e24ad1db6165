"""Per-query document rankings handed to the extractive answer."""

from __future__ import annotations

from retrieval.pipeline.answer import query_rankings
from retrieval.pipeline.fusion import Hit, QueryMatch, merge_results
from retrieval.pipeline.types import SearchQuery


def _hit(chunk: int, document: int) -> Hit:
    return Hit(chunk, document, f"doc-{document}", "T", "", "text", 0, "", 1, 1, 1.0)


def test_each_query_lists_its_own_documents_best_first_once() -> None:
    queries = [SearchQuery("quanto é o vale", "decompose"), SearchQuery("como peço", "decompose")]
    merged = merge_results(
        queries, [[_hit(1, 10), _hit(2, 10), _hit(3, 20)], [_hit(4, 30), _hit(3, 20)]]
    )
    rankings = query_rankings(queries, merged)
    assert rankings == {"quanto é o vale": ["10", "20"], "como peço": ["30", "20"]}


def test_a_query_that_found_nothing_has_an_empty_ranking() -> None:
    queries = [SearchQuery("a", "decompose"), SearchQuery("b", "decompose")]
    merged = merge_results(queries, [[_hit(1, 10)], []])
    assert query_rankings(queries, merged)["b"] == []
    assert all(isinstance(m, QueryMatch) for item in merged for m in item.matches)
