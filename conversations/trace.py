"""A stored turn's rewrite as the pages show it: one builder for the chat page and the admin.

The trace's `rewrite` and `search` are JSON written by `conversations.turns`; `rewrite_view`
reads them once, tolerating traces written before a field existed, into typed values that
the chat page (`conversations.views.present.trace_view`) and the staff timeline
(`conversations.review.timeline`) both render.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext_lazy

QUERY_TYPE_LABELS = {
    "normalize": gettext_lazy("reformulada"),
    "expand": gettext_lazy("expandida"),
    "decompose": gettext_lazy("decomposta"),
    "multi_query": gettext_lazy("variação"),
    "hyde": gettext_lazy("hipótese (HyDE)"),
    "original": gettext_lazy("suas palavras"),
}
BACKEND_LABELS = {
    "rules": gettext_lazy("regras e glossário"),
    "llm": gettext_lazy("modelo de linguagem"),
    "none": gettext_lazy("sem reescrita"),
    "last-turn": gettext_lazy("pergunta anterior + atual"),
}


@dataclass
class QueryView:
    """One query searched (masked text), numbered from 1."""

    number: int
    text: str
    type: str
    type_label: str
    weight: float | None
    area: str


@dataclass(frozen=True)
class GlossaryHitView:
    term: str
    expansion: str
    source: str = ""  # "question" or "history" (where the term was found)


@dataclass
class RewriteView:
    """What the rewrite decided and what was searched (masked text only)."""

    backend: str = ""
    backend_label: str = ""
    model: str = ""
    policy: str = ""  # the rewrite policy's version; empty on traces from before it was kept
    queries: list[QueryView] = field(default_factory=list)
    glossary: list[GlossaryHitView] = field(default_factory=list)
    corrections: list[tuple[str, str]] = field(default_factory=list)  # (typed, corrected)
    notes: list[str] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)
    clarification: dict[str, Any] | None = None  # {"question", "options"} when asked back
    error: str = ""  # why the rewrite fell back, if it did


def rewrite_view(rewrite: Mapping[str, Any], search: Mapping[str, Any] | None) -> RewriteView:
    """Read a trace's `rewrite` and `search`: the queries actually searched (the user's own
    words last) are in `search`, else (older traces) in `rewrite`."""
    backend = str(rewrite.get("backend") or "")
    searched = (search or {}).get("queries") or rewrite.get("queries") or []
    clarification = rewrite.get("clarification") if rewrite.get("needs_clarification") else None
    return RewriteView(
        backend=backend,
        backend_label=str(BACKEND_LABELS.get(backend, backend)),
        model=str(rewrite.get("model") or ""),
        policy=str(rewrite.get("policy") or ""),
        queries=[
            QueryView(
                number=i,
                text=str(q.get("text", "")),
                type=str(q.get("type", "")),
                type_label=str(QUERY_TYPE_LABELS.get(str(q.get("type", "")), q.get("type", ""))),
                weight=q.get("weight"),
                area=str(q.get("area") or ""),
            )
            for i, q in enumerate((q for q in searched if isinstance(q, dict)), start=1)
        ],
        glossary=[
            GlossaryHitView(
                term=str(h.get("term", "")),
                expansion=str(h.get("expansion", "")),
                source=str(h.get("source") or ""),
            )
            for h in rewrite.get("glossary_hits") or []
            if isinstance(h, dict)
        ],
        corrections=sorted((rewrite.get("corrections") or {}).items()),
        notes=[str(n) for n in rewrite.get("notes") or []],
        anomalies=[str(a) for a in rewrite.get("anomalies") or []],
        clarification=dict(clarification) if isinstance(clarification, dict) else None,
        error=str(rewrite.get("error") or ""),
    )
