"""Filters a turn fixes, applied as preferences over the merged hits (pure: no I/O).

Versions: a page a newer one replaced (marked so at ingestion or by staff, or whose title
says "revogada", "superseded") comes after the current pages, unless the question asks for
an old version ("a política antiga", "la regla anterior") or names a year that a page is
for ("a regra de 2024"): then that year's pages, or the old versions, come first.

A country the turn names, or that a follow-up carries from the conversation ("y si renuncio
antes de tomarlas?" after Chile's vacation days), must not be outvoted by a looser query:
the user's own words alone pull up another country's sibling page just as well. Among the
merged hits, pages whose title names that country come first, pages titled for another
country last, and the rest keep their order in between. It is a preference, never access
control: nothing is removed, and a page outside the user's permissions was never found.

An area works the same way ("como peço reembolso no financeiro?", "¿qué cubre en RRHH?"):
placed after a preposition, it must be one of the areas of the documents the reader may
read (the caller passes them), and that area's passages come first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar

from .fusion import MergedHit
from .languages import every_word_list, language_mappings
from .rewrite_rules.slots import countries_in, country_spans, slot_of
from .text import Token, normalize, token_spans
from .tuning import tuning
from .types import SearchQuery

_SECTION = "filters"


def _listed(name: str) -> frozenset[str]:
    """One word list of every language file's "filters", normalised."""
    return frozenset(normalize(w) for w in every_word_list(_SECTION, name))


def _mapping(name: str) -> dict[str, Any]:
    """One mapping of every language file's "filters", in file order (the later wins)."""
    merged: dict[str, Any] = {}
    for found in language_mappings(_SECTION, name):
        merged.update(found)
    return merged


# The words of each language file's "filters" (retrieval/pipeline/languages).
# "no Uruguai", "en Brasil", "in Germany": where the rule applies. A country after "para",
# "a", "do" is as often where someone travels or works from ("o viático para ir a Brasil",
# "trabalhar remoto do Uruguai"): the page of the person's own country answers those.
_LOCATIVE = _listed("locative")
_ARTICLES = _listed("articles")
# "a política de brindes do Uruguai", "las reglas de España": a country after "do"/"de"
# belongs to a rule or to the company's part there, when such a noun comes shortly before.
_GENITIVE = _listed("genitive")
_OWNERS = _listed("owners")

T = TypeVar("T")


def locative_countries(text: str) -> frozenset[str]:
    """Return the countries `text` places something in ("no Uruguai", "en el Perú")."""
    return _countries(token_spans(text))[0]


def _countries(tokens: Sequence[Token]) -> tuple[frozenset[str], frozenset[str]]:
    """Return (the countries placed after a locative preposition, every country named)."""
    placed: set[str] = set()
    named: set[str] = set()
    for first, _last, key in country_spans(tokens):
        named.add(key)
        before = first - 1
        if before >= 0 and tokens[before].norm in _ARTICLES:
            before -= 1
        if before >= 0 and tokens[before].norm in _LOCATIVE:
            placed.add(key)
        elif before >= 0 and tokens[before].norm in _GENITIVE:
            owners = {t.norm for t in tokens[max(0, before - tuning().owner_reach) : before]}
            if owners & _OWNERS:
                placed.add(key)
    return frozenset(placed), frozenset(named)


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
        placed, named = _countries(token_spans(query.text))
        found |= placed
        carried = named - found
        if query.reading == "contextual" and carried:
            if earlier is None:
                earlier = frozenset().union(*(locative_countries(t) for t in earlier_questions))
            found |= carried & earlier
    return frozenset(found)


def prefer_countries(merged: Sequence[MergedHit], countries: frozenset[str]) -> list[MergedHit]:
    """Put pages titled for `countries` first and pages titled for other countries last."""
    ranked = list(merged)
    if not countries:
        return ranked
    named_in = _by_title(countries_in)

    def rank_class(index: int) -> tuple[int, int]:
        named = named_in(ranked[index].hit.title)
        return (0 if named & countries else 2 if named else 1), index

    return [ranked[i] for i in sorted(range(len(ranked)), key=rank_class)]


# A question asking for a version no longer in force.
_OLD_WORDS = _listed("old_version")
# A title that says its page was replaced ("... 2024 (REVOGADA)", "(superseded)").
_REPLACED_TITLE = _listed("replaced_title")
# What an old-version word must qualify ("a política antiga", not "o celular antigo").
_VERSIONED = _listed("versioned")
EARLIEST_YEAR = 1990
# A year named by its distance from today's (the reader's local date).
_RELATIVE_YEARS: dict[tuple[str, ...], int] = {
    tuple(normalize(phrase).split()): int(back)
    for phrase, back in _mapping("relative_years").items()
}


@dataclass(frozen=True)
class VersionAsk:
    """What the turn asks of versions: an old one, or one year's (a typed, checked year)."""

    old: bool = False
    year: int | None = None


def version_ask(texts: Sequence[str], today: date | None = None) -> VersionAsk:
    """Read "a política antiga" or "a regra de 2024" from the turn's queries.

    A year counts within EARLIEST_YEAR..next year; the current year asks nothing special.
    """
    latest = (today.year if today else date.max.year) + 1
    old = False
    year = None
    for text in texts:
        tokens = token_spans(text)
        words = [t.norm for t in tokens]
        if today is not None:
            # "a regra do ano passado", "el año pasado", "last year": that year's pages.
            for pair, back in _RELATIVE_YEARS.items():
                if any(tuple(words[i : i + 2]) == pair for i in range(len(words) - 1)):
                    year = today.year - back
        for index, token in enumerate(tokens):
            near = tokens[max(0, index - 2) : index + 3]
            if token.norm in _OLD_WORDS and any(t.norm in _VERSIONED for t in near):
                old = True
            elif slot_of(token.norm) == "year" and EARLIEST_YEAR <= int(token.norm) <= latest:
                if today is None or int(token.norm) != today.year:
                    year = int(token.norm)
    return VersionAsk(old, year)


def _by_title(derive: Callable[[Sequence[Token]], T]) -> Callable[[str], T]:
    """`derive` of a title's tokens, computed once per distinct title: one call's hits are
    passages of a few documents, so most of them share a title."""
    cache: dict[str, T] = {}

    def of(title: str) -> T:
        if title not in cache:
            cache[title] = derive(token_spans(title))
        return cache[title]

    return of


def _words(tokens: Sequence[Token]) -> frozenset[str]:
    return frozenset(t.norm for t in tokens)


def _replaced(item: MergedHit, title_words: Callable[[str], frozenset[str]]) -> bool:
    return item.hit.superseded or not _REPLACED_TITLE.isdisjoint(title_words(item.hit.title))


def _of_year(item: MergedHit, year: int, title_words: Callable[[str], frozenset[str]]) -> bool:
    if item.hit.effective is not None:
        return item.hit.effective.year == year
    return str(year) in title_words(item.hit.title)


# Words of a title that name its version, not its subject ("programa 2024 (SUBSTITUÍDO)").
_VERSION_WORDS = _REPLACED_TITLE | _VERSIONED | _listed("version_words")


def _subject_words(tokens: Sequence[Token]) -> frozenset[str]:
    return frozenset(
        t.norm
        for t in tokens
        if len(t.norm) > 3 and not t.norm.isdigit() and t.norm not in _VERSION_WORDS
    )


def _siblings(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two titles' subject words make them versions of one page ("Participação nos
    lucros — programa 2024" and "— programa 2026"; not "Trabalho remoto 2024")."""
    if not a or not b:
        return False
    return len(a & b) >= tuning().sibling_share * min(len(a), len(b))


def prefer_current(merged: Sequence[MergedHit], ask: VersionAsk) -> tuple[list[MergedHit], str]:
    """Order the hits by version (see the module's docstring); say what moved, or "".

    A page the question asks for (the old version, that year's) moves up past its own
    other versions only: asking how a policy was before puts the replaced page
    before the current one, never the replaced remote-work page before both. A replaced
    page asked for by nobody goes after every current one.
    """
    ranked = list(merged)
    title_words = _by_title(_words)
    replaced = [_replaced(item, title_words) for item in ranked]
    year = ask.year
    of_year = [] if year is None else [_of_year(item, year, title_words) for item in ranked]
    if any(of_year):
        wanted = of_year
        note = f"version: {ask.year}'s pages first"
    elif not any(replaced):
        return ranked, ""
    elif ask.old or ask.year is not None:
        wanted = replaced
        note = "version: the question asks for an old one: replaced pages first"
    else:
        keys = [1 if r else 0 for r in replaced]
        order = sorted(range(len(ranked)), key=lambda i: (keys[i], i))
        if order == list(range(len(ranked))):
            return ranked, ""
        note = f"version: current pages first ({sum(replaced)} replaced passages after)"
        return [ranked[i] for i in order], note
    subject = _by_title(_subject_words)
    order = []
    placed: set[int] = set()
    for i, item in enumerate(ranked):
        if i in placed:
            continue
        if not wanted[i]:
            words = subject(item.hit.title)
            for j in range(i + 1, len(ranked)):
                if wanted[j] and j not in placed and _siblings(subject(ranked[j].hit.title), words):
                    order.append(j)
                    placed.add(j)
        order.append(i)
        placed.add(i)
    if order == list(range(len(ranked))):
        return ranked, ""
    return [ranked[i] for i in order], note


def prefer_named_titles(merged: Sequence[MergedHit], names: Sequence[str]) -> list[MergedHit]:
    """Put first the pages whose title says everything the question's company terms stand
    for, when it used two or more ("regra do VR no home": "Vale-refeição no trabalho remoto"
    before the meal allowance's general rule). One term alone is no subject: "o VA continua
    caindo durante a licença?" asks about the leave."""
    ranked = list(merged)
    wanted = {frozenset(t.norm for t in token_spans(n) if len(t.norm) > 2) for n in names}
    wanted.discard(frozenset())
    if len(wanted) < 2:
        return ranked
    title_words = _by_title(_words)
    named = [all(w <= title_words(item.hit.title) for w in wanted) for item in ranked]
    if not any(named):
        return ranked
    order = sorted(range(len(ranked)), key=lambda i: (not named[i], i))
    return [ranked[i] for i in order]


# "no financeiro", "en RRHH", "in HR": the department the question is placed in. Each
# department's names in every language file (normalised); a collection's area counts when its
# name is one of them, and is then named by any of them.
_AREA_PREPOSITIONS = _listed("area_prepositions")


def _area_names() -> dict[str, frozenset[str]]:
    names: dict[str, set[str]] = {}
    for found in language_mappings(_SECTION, "areas"):
        for key, aliases in found.items():
            names.setdefault(key, set()).update(normalize(a) for a in aliases)
    return {key: frozenset(aliases) for key, aliases in names.items()}


_AREA_NAMES = _area_names()
_LONGEST_AREA_NAME = 4  # words
# Names that are common words in lower case: "in it" is no area, "in IT" is.
_CAPITALS_ONLY = frozenset((w,) for w in _listed("areas_in_capitals_only"))


def area_ask(texts: Sequence[str], areas: Sequence[str]) -> frozenset[str]:
    """Return the areas (as the collection calls them) the texts place their question in.

    Only a department among `areas` counts, named after a preposition ("no financeiro", "na
    TI"): "o que a TI fornece?" asks about IT's supplies, not in IT's pages alone.
    """
    known = {normalize(a).replace("-", " "): a for a in areas if a.strip()}
    if not known:
        return frozenset()
    names: dict[tuple[str, ...], str] = {}
    for key, area in known.items():
        # Only a department counts: an area such as "trabalho-remoto" or "desligamento" is a
        # subject ("o VR no trabalho remoto" asks about the meal card), not where to look.
        for alias in next((n for n in _AREA_NAMES.values() if key in n), frozenset()):
            names[tuple(alias.split())] = area
    found: set[str] = set()
    for text in texts:
        tokens = token_spans(text)
        for i, token in enumerate(tokens[:-1]):
            if token.norm not in _AREA_PREPOSITIONS:
                continue
            start = i + 1 + (tokens[i + 1].norm in _ARTICLES and i + 2 < len(tokens))
            for size in range(min(_LONGEST_AREA_NAME, len(tokens) - start), 0, -1):
                words = tuple(t.norm for t in tokens[start : start + size])
                if words in _CAPITALS_ONLY and not tokens[start].text.isupper():
                    continue
                if words in names:
                    found.add(names[words])
                    break
    return frozenset(found)


def prefer_areas(merged: Sequence[MergedHit], areas: frozenset[str]) -> list[MergedHit]:
    """Put the passages of `areas` first; the rest keep their order after them."""
    ranked = list(merged)
    if not areas:
        return ranked
    order = sorted(range(len(ranked)), key=lambda i: (ranked[i].hit.area not in areas, i))
    return [ranked[i] for i in order]
