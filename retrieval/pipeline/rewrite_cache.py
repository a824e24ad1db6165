"""A rewrite cached by everything that decides it (pure: the store is the caller's).

A model's rewrite costs seconds; the same masked window and question, read with the same
glossary, prompt and model, for a reader with the same permissions and language, on the same
day (the prompt holds today's date), give the same rewrite. The key holds all of those, so a
cached rewrite never serves a turn its user could not have produced, and any change of
prompt, glossary or model misses. Only the rewrite is cached: the searches and the decisions
taken from their evidence run every turn. The rules are not cached (see retrieve.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any, Protocol

from .search import Scope
from .types import (
    Clarification,
    FiredRule,
    GlossaryHit,
    RewriteInput,
    RewriteResult,
    SearchQuery,
)

KEY_VERSION = 1  # bump when the key or the stored state changes shape


class RewriteCache(Protocol):
    """Where rewrites are kept (Django's cache in the app; nothing in evaluations)."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def set(self, key: str, value: dict[str, Any]) -> None: ...


def cache_key(
    inp: RewriteInput, *, scope: Scope, policy: str, backend: str, model: str | None
) -> str:
    """Return the key of one rewrite: a hash of everything that can change it."""
    parts = {
        "v": KEY_VERSION,
        "policy": policy,
        "backend": backend,
        "model": model,
        "collection": scope.collection_id,
        "groups": sorted(scope.group_ids),
        "everything": scope.see_everything,
        "language": inp.language,
        "default_language": inp.default_language,
        "today": inp.today.isoformat() if inp.today else None,
        "question": inp.question,
        "window": [[m.role, m.text] for m in inp.history],
        "earlier": inp.earlier_messages,
        "glossary": sorted([g.term, g.expansion, g.area or ""] for g in inp.glossary),
        "limits": [inp.max_queries, inp.max_query_chars],
    }
    payload = json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()
    return "rewrite:" + hashlib.sha256(payload).hexdigest()


def to_state(result: RewriteResult, computed_ms: float) -> dict[str, Any]:
    """Return a JSON-ready copy of a fresh rewrite, with the time it took."""
    return {"result": asdict(result), "computed_ms": round(computed_ms, 3)}


def from_state(state: dict[str, Any]) -> tuple[RewriteResult, float]:
    """Rebuild a rewrite (a new object: the turn adds its own decisions to it)."""
    data = dict(state["result"])
    data["queries"] = [SearchQuery(**q) for q in data.get("queries", [])]
    clarification = data.get("clarification")
    if clarification:
        data["clarification"] = Clarification(
            clarification["question"], tuple(clarification.get("options", ()))
        )
    data["glossary_hits"] = [GlossaryHit(**h) for h in data.get("glossary_hits", [])]
    for name in ("new_terms", "clarify_terms", "countries", "areas"):
        data[name] = tuple(data.get(name, ()))
    data["notes"] = list(data.get("notes", []))
    data["fired"] = [FiredRule(**r) for r in data.get("fired", [])]
    return RewriteResult(**data), float(state.get("computed_ms", 0.0))
