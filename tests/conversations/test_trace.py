"""One reading of a stored rewrite for the chat page and the staff timeline."""

from __future__ import annotations

from typing import Any

from conversations.models import TurnTrace
from conversations.trace import GlossaryHitView, QueryView, rewrite_view
from conversations.views.present import trace_view

REWRITE: dict[str, Any] = {
    "backend": "rules",
    "model": None,
    "policy": "rules-2026.12.1",
    "queries": [{"text": "vale-refeição trabalho remoto", "type": "expand", "weight": 1.0}],
    "glossary_hits": [
        {"term": "VR", "expansion": "vale-refeição", "source": "question"},
        {"term": "home", "expansion": "trabalho remoto", "source": "history"},
        "not a hit",
    ],
    "corrections": {"reenbolso": "reembolso", "ferias": "férias"},
    "notes": ["follow-up: took the topic from the previous question"],
    "anomalies": [],
    "needs_clarification": True,
    "clarification": {"question": "Sobre o que?", "options": ["férias", "reembolso"]},
    "error": "",
}
SEARCH: dict[str, Any] = {
    "queries": [
        {"text": "vale-refeição trabalho remoto", "type": "expand", "weight": 1.0, "area": None},
        {"text": "regra do VR no home", "type": "original", "weight": 0.5, "area": "beneficios"},
    ]
}


def test_the_page_and_the_timeline_read_a_trace_alike() -> None:
    view = rewrite_view(REWRITE, SEARCH)
    assert view.backend == "rules" and view.model == "" and view.policy == "rules-2026.12.1"
    assert [q.text for q in view.queries] == [q["text"] for q in SEARCH["queries"]]
    assert view.queries[1] == QueryView(
        2, "regra do VR no home", "original", "suas palavras", 0.5, "beneficios"
    )
    assert view.glossary == [
        GlossaryHitView("VR", "vale-refeição", "question"),
        GlossaryHitView("home", "trabalho remoto", "history"),
    ]
    assert view.corrections == [("ferias", "férias"), ("reenbolso", "reembolso")]
    page = trace_view(TurnTrace(rewrite=REWRITE, search=SEARCH, errors=["x"]), question="q?")
    assert page is not None
    assert [(q["text"], q["type"], q["label"], q["weight"]) for q in page["queries"]] == [
        (q.text, q.type, q.type_label, q.weight) for q in view.queries
    ]
    assert page["glossary"] == [{"term": g.term, "expansion": g.expansion} for g in view.glossary]
    assert page["backend_label"] == view.backend_label == "regras e glossário"
    for key in ("corrections", "notes", "anomalies", "clarification"):
        assert page[key] == getattr(view, key), key
    assert page["errors"] == ["x"] and page["original"] == "q?"


def test_a_trace_without_search_shows_the_rewrite_queries_on_both() -> None:
    # Traces from before the search was stored (the timeline used to show no queries).
    view = rewrite_view({**REWRITE, "needs_clarification": False}, None)
    assert [q.text for q in view.queries] == ["vale-refeição trabalho remoto"]
    assert view.clarification is None
    page = trace_view(TurnTrace(rewrite=REWRITE, search={}), question="q?")
    assert page is not None and len(page["queries"]) == 1
    assert trace_view(TurnTrace(rewrite={}), question="q?") is None
