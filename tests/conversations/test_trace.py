"""The turn trace's one typed definition, and the [rewrite] block built once, live and stored."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.utils import translation

from conversations.models import TurnTrace
from conversations.quality.review.timeline import turn_review_for_trace
from conversations.services import conversation_create, message_store_user
from conversations.trace import (
    FoundBy,
    QueryView,
    TraceClarification,
    TraceGlossaryHit,
    TraceHit,
    TraceMessage,
    TraceQuery,
    TraceRewrite,
    TraceSearch,
    read_trace,
    rewrite_block,
    rewrite_view,
)
from conversations.turn import turn_run
from conversations.views.present import trace_view
from retrieval.pipeline.types import SearchQuery

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
    "cache": "hit",
}
SEARCH: dict[str, Any] = {
    "queries": [
        {"text": "vale-refeição trabalho remoto", "type": "expand", "weight": 1.0, "area": None},
        {"text": "regra do VR no home", "type": "original", "weight": 0.5, "area": "beneficios"},
    ],
    "hits": [
        {
            "chunk": 7,
            "document": "pt/vr",
            "title": "Vale-refeição",
            "score": 0.031,
            "found_by": [
                {"query": 0, "rank": 1, "vector_rank": 2, "text_rank": 3, "score": 0.016},
                {"query": 1, "rank": 4, "vector_rank": None, "text_rank": 1, "score": 0.015},
            ],
        },
        {
            "chunk": 9,
            "document": "pt/vr",
            "title": "Vale-refeição",
            "score": 0.02,
            "found_by": [],
        },
    ],
    "passages": [7],
}


def _row(**fields: Any) -> TurnTrace:
    return TurnTrace(**{"rewrite": REWRITE, "search": SEARCH, **fields})


def test_a_stored_trace_reads_once_into_its_typed_definition() -> None:
    trace = read_trace(
        _row(
            masked_question="e o VR no home?",
            masked_window=[{"role": "user", "text": "oi"}, "junk"],
            timings_ms={"rewrite": 12, "to_done": 900.5, "odd": "x"},
            errors=["x"],
            clarified=True,
        )
    )
    assert trace.masked_window == (TraceMessage("user", "oi"),)
    assert trace.timings_ms == {"rewrite": 12.0, "to_done": 900.5}
    assert trace.total_ms == 900.5 and trace.errors == ("x",)
    rewrite = trace.rewrite
    assert (rewrite.backend, rewrite.model, rewrite.cache) == ("rules", "", "hit")
    assert rewrite.glossary == (
        TraceGlossaryHit("VR", "vale-refeição", "question"),
        TraceGlossaryHit("home", "trabalho remoto", "history"),
    )
    assert rewrite.corrections == (("ferias", "férias"), ("reenbolso", "reembolso"))
    assert rewrite.clarification == TraceClarification("Sobre o que?", ("férias", "reembolso"))
    assert trace.searched == (
        TraceQuery("vale-refeição trabalho remoto", "expand", 1.0, ""),
        TraceQuery("regra do VR no home", "original", 0.5, "beneficios"),
    )
    first = trace.search.hits[0]
    assert first.found_by[1] == FoundBy(1, 4, None, 1, 0.015)
    assert first.corroborated and trace.search.corroborated
    assert trace.search.ranking() == [("pt/vr", "Vale-refeição")]
    assert trace.search.passages == (7,)


def test_the_search_json_read_is_the_json_written() -> None:
    assert TraceSearch.read(SEARCH).json() == SEARCH


def test_a_querys_reading_and_the_rewrites_topic_are_kept() -> None:
    """Why a query was searched (the fidelity review shows it) needs its reading and the
    topic it carried; a query without a reading is stored as before."""
    query = SearchQuery("vale-refeição estagiários", "expand", reading="contextual")
    stored = TraceQuery.of(query).json()
    assert stored["reading"] == "contextual"
    assert TraceQuery.read(stored) == TraceQuery.of(query)
    assert "reading" not in TraceQuery.of(SearchQuery("férias", "original")).json()
    rewrite = TraceRewrite.read({**REWRITE, "topic": "vale-refeição"})
    assert rewrite.topic == "vale-refeição" and TraceRewrite.read(REWRITE).topic == ""
    view = rewrite_view(rewrite, [TraceQuery.read(stored)])
    assert view.queries[0].reading == "contextual"


def test_an_empty_or_old_trace_reads_without_errors() -> None:
    trace = read_trace(TurnTrace())
    assert trace.searched == () and trace.search.hits == () and trace.total_ms is None
    assert not trace.weak and trace.rewrite.clarification is None
    # A hit found by one leg only is not corroborated: results, but weak ones.
    lone = TraceHit(1, "pt/a", "A", 0.1, (FoundBy(0, 1, 1, None, 0.1),))
    assert not lone.corroborated
    # Traces from before the search was stored show the rewrite's queries.
    old = read_trace(TurnTrace(rewrite={**REWRITE, "needs_clarification": False}))
    assert [q.text for q in old.searched] == ["vale-refeição trabalho remoto"]
    assert old.rewrite.clarification is None


def test_the_page_and_the_timeline_read_a_trace_alike() -> None:
    row = _row(errors=["x"])
    trace = read_trace(row)
    view = rewrite_view(trace.rewrite, trace.searched)
    assert view.queries[1] == QueryView(
        2, "regra do VR no home", "original", "suas palavras", 0.5, "beneficios"
    )
    page = trace_view(row, question="q?")
    assert page is not None
    assert [(q["text"], q["type"], q["label"], q["weight"]) for q in page["queries"]] == [
        (q.text, q.type, q.type_label, q.weight) for q in view.queries
    ]
    assert page["backend_label"] == view.backend_label == "regras e glossário"
    assert page["corrections"] == {"ferias": "férias", "reenbolso": "reembolso"}
    assert page["clarification"] == {"question": "Sobre o que?", "options": ["férias", "reembolso"]}
    assert page["errors"] == ["x"] and page["original"] == "q?"
    # The page's block is the frame's plus what the server renders (labels, highlights).
    extra = {"backend_label"}
    assert {k: v for k, v in page.items() if k not in extra} | {
        "queries": [{k: q[k] for k in ("text", "type", "weight", "area")} for q in page["queries"]]
    } == rewrite_block(view, original="q?", errors=["x"])
    assert trace_view(TurnTrace(rewrite={}), question="q?") is None


@pytest.mark.django_db(transaction=True)
def test_the_live_rewrite_frame_and_the_stored_trace_agree(
    small_kb: Any, personas: dict[str, User]
) -> None:
    """The browser's live [rewrite] block, the chat page after a reload and the staff
    timeline show one turn alike (no personal data here: live queries are unmasked)."""
    question = "qual o valr do VR no home? e como peço o VA?"
    conversation = conversation_create(user=personas["ana"])
    message = message_store_user(conversation=conversation, text=question)
    frames: list[dict[str, Any]] = []

    async def emit(frame: dict[str, Any]) -> None:
        frames.append(frame)

    async_to_sync(turn_run)(message_id=message.id, emit=emit)
    live = next(f for f in frames if f["type"] == "rewrite")
    assert (live.pop("type"), live.pop("message_id")) == ("rewrite", message.id)
    assert live["glossary"] and len(live["queries"]) > 1, live

    row = TurnTrace.objects.get(message=message)
    page = trace_view(row, question=question)
    assert page is not None
    del page["backend_label"]
    for query in page["queries"]:
        del query["label"], query["segments"]
    for rule in page["rules"]:
        del rule["label"]
    assert page == live

    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    review = turn_review_for_trace(trace=row, viewer=boss)
    timeline = rewrite_block(review.rewrite, original=question, errors=review.errors)
    assert timeline == live


def test_the_page_names_each_rule_that_fired_in_the_pages_language() -> None:
    detail = "spelling: 'ferias' -> 'férias'"
    row = _row(
        rewrite={
            **REWRITE,
            "notes": [*REWRITE["notes"], detail],
            "rules": [{"id": "spelling", "detail": detail}, {"id": "someday_rule", "detail": "x"}],
        }
    )
    pages = {}
    for language in ("pt-br", "en", "es"):
        with translation.override(language):
            pages[language] = trace_view(row, question="q?")
    labels = {lang: [r["label"] for r in page["rules"]] for lang, page in pages.items() if page}
    assert labels == {
        "pt-br": ["ortografia corrigida", "someday_rule"],
        "en": ["spelling corrected", "someday_rule"],
        "es": ["ortografía corregida", "someday_rule"],
    }
    page = pages["en"]
    assert page is not None and page["rules"][0]["detail"] == detail
    # A rule's detail is shown once, beside its label, not again among the notes.
    assert page["notes"] == REWRITE["notes"]
    # A trace stored before rules were kept shows its notes as they were.
    old = trace_view(_row(rewrite={**REWRITE, "notes": [detail]}), question="q?")
    assert old is not None and old["rules"] == [] and old["notes"] == [detail]


def test_every_rule_the_code_fires_has_a_label_for_the_page() -> None:
    """A rule id fired anywhere in the pipeline (`fire("id", ...)`, `FiredRule("id", ...)`,
    the reading rules) is named on the page in its language, not shown as its raw id."""
    import re
    from pathlib import Path

    from conversations.trace import RULE_LABELS
    from retrieval.pipeline.retrieve import _READING_RULES

    source = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (Path(__file__).resolve().parents[2] / "retrieval" / "pipeline").rglob("*.py")
    )
    fired = set(re.findall(r"(?:fire|_fire_once|FiredRule)\(\s*(?:ctx,\s*)?\"([a-z_]+)\"", source))
    fired |= set(_READING_RULES.values())
    assert len(fired) >= 25, fired
    assert fired <= RULE_LABELS.keys(), fired - RULE_LABELS.keys()
