"""The rule rewriter's result while its rules run: filled in place, then frozen once.

The rules add queries, glossary hits and notes as they fire, across a dozen functions;
passing a new value back from each would change every signature for no gain. They write to
this draft, private to one rewrite, and `build` makes the one `RewriteResult` it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from retrieval.pipeline.types import (
    Clarification,
    FiredRule,
    GlossaryHit,
    RewriteResult,
    SearchQuery,
)


@dataclass
class Draft:
    """The fields of `RewriteResult` the rules decide (see there for each)."""

    queries: list[SearchQuery] = field(default_factory=list)
    needs_clarification: bool = False
    clarification: Clarification | None = None
    clarify_reason: str | None = None
    glossary_hits: list[GlossaryHit] = field(default_factory=list)
    corrections: dict[str, str] = field(default_factory=dict)
    no_search: bool = False
    small_talk: str | None = None
    topic: str | None = None
    new_terms: tuple[str, ...] = ()
    clarify_terms: tuple[str, ...] = ()
    safe_original: str | None = None
    fired: list[FiredRule] = field(default_factory=list)

    def fire(self, rule: str, detail: str) -> None:
        """Record that `rule` fired, with its detail (also the trace's note)."""
        self.fired.append(FiredRule(rule, detail))

    def build(self) -> RewriteResult:
        """The rewrite the rules decided, as one frozen value."""
        return RewriteResult(
            queries=list(self.queries),
            backend="rules",
            needs_clarification=self.needs_clarification,
            clarification=self.clarification,
            clarify_reason=self.clarify_reason,
            glossary_hits=list(self.glossary_hits),
            corrections=dict(self.corrections),
            notes=[rule.detail for rule in self.fired],
            no_search=self.no_search,
            small_talk=self.small_talk,
            topic=self.topic,
            new_terms=self.new_terms,
            clarify_terms=self.clarify_terms,
            safe_original=self.safe_original,
            fired=list(self.fired),
        )
