"""Filters a turn fixes, applied as preferences over the merged hits (pure: no I/O).

A country the turn names, or that a follow-up carries from the conversation ("y si renuncio
antes de tomarlas?" after Chile's vacation days), must not be outvoted by a looser query:
the user's own words alone pull up another country's sibling page just as well. Among the
merged hits, pages whose title names that country come first, pages titled for another
country last, and the rest keep their order in between. It is a preference, never access
control: nothing is removed, and a page outside the user's permissions was never found.
"""

from __future__ import annotations

from collections.abc import Sequence

from .fusion import MergedHit
from .rewrite_rules.slots import countries_in, country_spans
from .text import token_spans
from .types import SearchQuery

# "no Uruguai", "en Brasil", "in Germany": where the rule applies. A country after "para",
# "a", "do" is as often where someone travels or works from ("o viático para ir a Brasil",
# "trabalhar remoto do Uruguai"): the page of the person's own country answers those.
_LOCATIVE = frozenset({"em", "no", "na", "nos", "nas", "en", "in"})
_ARTICLES = frozenset({"o", "a", "el", "la", "the"})


def locative_countries(text: str) -> frozenset[str]:
    """Return the countries `text` places something in ("no Uruguai", "en el Perú")."""
    tokens = token_spans(text)
    found: set[str] = set()
    for first, _last, key in country_spans(tokens):
        before = first - 1
        if before >= 0 and tokens[before].norm in _ARTICLES:
            before -= 1
        if before >= 0 and tokens[before].norm in _LOCATIVE:
            found.add(key)
    return frozenset(found)


def turn_countries(
    queries: Sequence[SearchQuery], earlier_questions: Sequence[str] = ()
) -> frozenset[str]:
    """Return the countries the turn's queries place the question in.

    A topic-aware query carries the country without its preposition ("si renuncio ...
    vacaciones Chile"): it counts when the user's earlier question placed it there.
    """
    found: set[str] = set()
    earlier: frozenset[str] | None = None
    for query in queries:
        found |= locative_countries(query.text)
        named = countries_in(token_spans(query.text)) - found
        if query.reading == "contextual" and named:
            if earlier is None:
                earlier = frozenset().union(*(locative_countries(t) for t in earlier_questions))
            found |= named & earlier
    return frozenset(found)


def prefer_countries(merged: Sequence[MergedHit], countries: frozenset[str]) -> list[MergedHit]:
    """Put pages titled for `countries` first and pages titled for other countries last."""
    ranked = list(merged)
    if not countries:
        return ranked
    titles: dict[str, frozenset[str]] = {}

    def rank_class(index: int) -> tuple[int, int]:
        title = ranked[index].hit.title
        if title not in titles:
            titles[title] = countries_in(token_spans(title))
        named = titles[title]
        return (0 if named & countries else 2 if named else 1), index

    return [ranked[i] for i in sorted(range(len(ranked)), key=rank_class)]
