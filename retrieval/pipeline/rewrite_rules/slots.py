"""Slots a follow-up can fill with a new value: "e para PJ?" replaces "CLT".

The values are data: each language file's "slots", "cases" and "places"
(retrieval/pipeline/languages); an added language's file adds its own.

A new value of a slot replaces the old one when a topic is carried over, so "y en Chile?"
after "vacaciones en España" searches Chile, not España.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from retrieval.pipeline.languages import keyed_word_lists, language_mappings
from retrieval.pipeline.text import Token, normalize

# The values of each slot are each language file's "slots" (retrieval/pipeline/languages):
# words, and phrases of several words ("pessoa jurídica", "fuera del país"), normalised.
_SLOT_VALUES = {
    slot: tuple(normalize(value) for value in values)
    for slot, values in keyed_word_lists("slots").items()
}
# Places are each language file's "places" (retrieval/pipeline/languages), by a country key
# that every file shares: a country's names ("Uruguai", "Uruguay"), its abbreviations ("EUA",
# "UK") and its cities ("Montevidéu"). All of them fill the "place" slot; a country's names
# and abbreviations name it (`country_key`); a city names its country only for an answer's
# lines (`places_in`), never for a filter.
_COUNTRY_NAMES = keyed_word_lists("places", "countries")
_ABBREVIATIONS = keyed_word_lists("places", "country_abbreviations")
_CITY_NAMES = keyed_word_lists("places", "cities")


def _by_words(named: Mapping[str, Sequence[str]]) -> dict[tuple[str, ...], str]:
    """Each name's normalised words, to the key it names."""
    return {tuple(normalize(name).split()): key for key, names in named.items() for name in names}


_COUNTRY_OF = {**_by_words(_ABBREVIATIONS), **_by_words(_COUNTRY_NAMES)}
_CITY_COUNTRY = _by_words(_CITY_NAMES)
_PLACES = {**_COUNTRY_OF, **_CITY_COUNTRY}
_SLOT_PHRASES: dict[tuple[str, ...], str] = {
    **{words: "place" for words in _PLACES if len(words) > 1},
    **{
        tuple(value.split()): slot
        for slot, values in _SLOT_VALUES.items()
        for value in values
        if " " in value
    },
}
_YEAR_RE = re.compile(r"^(?:19|20)\d\d$")


def _stem(word: str) -> str:
    """Fold plurals so "estagiários", "colaboradores", "contractors" find their slot."""
    if len(word) > 4 and word.endswith("es") and word[-3] in "rlnzd":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


_SLOT_OF: dict[str, str] = {
    **{words[0]: "place" for words in _PLACES if len(words) == 1},
    **{
        value: slot for slot, values in _SLOT_VALUES.items() for value in values if " " not in value
    },
}


def slot_of(word: str) -> str | None:
    """Return the slot of one normalised word, or None."""
    if _YEAR_RE.match(word):
        return "year"
    slot = _SLOT_OF.get(word) or _SLOT_OF.get(_stem(word))
    if slot is None and len(word) > 2 and word.endswith("s"):
        slot = _SLOT_OF.get(word[:-1])  # short plurals: "PJs", "CLTs"
    return slot


def _phrase_spans(
    words: Sequence[str], phrases: Mapping[tuple[str, ...], str], taken: set[int]
) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    present = set(words)
    for phrase, slot in sorted(phrases.items(), key=lambda item: -len(item[0])):
        if phrase and phrase[0] not in present:
            continue  # most phrases: no need to look at every position
        size = len(phrase)
        for i in range(len(words) - size + 1):
            if tuple(words[i : i + size]) == phrase and not taken & set(range(i, i + size)):
                spans.append((i, i + size - 1, slot))
                taken.update(range(i, i + size))
    return spans


def slot_spans(
    tokens: Sequence[Token], extra: Mapping[tuple[str, ...], str] | None = None
) -> list[tuple[int, int, str]]:
    """Return (first, last, slot) for each slot value in the tokens, longest phrases first.

    `extra` adds slots of the caller's own, such as glossary terms by area; a word may
    fill one built-in slot and one of those ("CLT": audience and a glossary area).
    """
    words = [t.norm for t in tokens]
    taken: set[int] = set()
    spans = _phrase_spans(words, _SLOT_PHRASES, taken)
    for i, word in enumerate(words):
        single = slot_of(word)
        if single and i not in taken:
            spans.append((i, i, single))
    spans += _phrase_spans(words, extra or {}, set())
    return sorted(spans)


# A country's name in the other languages, so that "no Uruguai" finds a page in Spanish
# that says "Uruguay" (the full-text leg matches words, not countries). Its abbreviations
# are not added: "usa" is also a Spanish verb.
_VARIANTS: dict[str, tuple[str, ...]] = {
    normalize(name): tuple(other for other in names if normalize(other) != normalize(name))
    for names in _COUNTRY_NAMES.values()
    for name in names
}


def place_variants(word: str) -> tuple[str, ...]:
    """Return a country's other names ("uruguai" -> "Uruguay"), or () for anything else."""
    return _VARIANTS.get(word, ())


_CITIES = frozenset(words[0] for words in _CITY_COUNTRY if len(words) == 1)
_COUNTRY_PHRASES = {words: key for words, key in _COUNTRY_OF.items() if len(words) > 1}


def country_key(word: str) -> str | None:
    """Return the key of the country one normalised word names, in any of its languages
    ("uruguai", "uruguay": "uruguai"); None for a city or anything else."""
    if word in _CITIES or slot_of(word) != "place":
        return None
    return (
        _COUNTRY_OF.get((word,))
        or _COUNTRY_OF.get((_stem(word),))
        or _COUNTRY_OF.get((word[:-1],) if word.endswith("s") else ())
    )


def country_spans(tokens: Sequence[Token]) -> list[tuple[int, int, str]]:
    """Return (first, last, country_key) for each country the tokens name."""
    words = [t.norm for t in tokens]
    taken: set[int] = set()
    spans = _phrase_spans(words, _COUNTRY_PHRASES, taken)
    for i, word in enumerate(words):
        key = country_key(word)
        if key is not None and i not in taken:
            spans.append((i, i, key))
    return sorted(spans)


def narrows_place(older: set[str], newer: set[str]) -> bool:
    """Tell whether a place's newer value is a city of the older one's country ("Chile",
    then "y en Santiago?"): it narrows the place rather than replacing it. Both are a slot's
    words, in any order."""
    cities = {key for words, key in _CITY_COUNTRY.items() if newer.issuperset(words)}
    return any(key in cities for words, key in _COUNTRY_OF.items() if older.issuperset(words))


def countries_in(tokens: Sequence[Token]) -> frozenset[str]:
    """Return the countries the tokens name, by their `country_key`."""
    return frozenset(key for _first, _last, key in country_spans(tokens))


def places_in(tokens: Sequence[Token]) -> frozenset[str]:
    """Return the countries the tokens name, a city's country included ("pra Montevidéu":
    "uruguai"), by their `country_key`."""
    words = [t.norm for t in tokens]
    taken: set[int] = set()
    keys = {country for _, _, country in _phrase_spans(words, _CITY_COUNTRY, taken)}
    for first, last, key in country_spans(tokens):
        if not taken & set(range(first, last + 1)):
            keys.add(key)
    return frozenset(keys)


# One name per case, in any language, for the slots an answer line can be about another
# case of: a line on "maternidad" does not answer "paternidade", one on "paternidad" does.
# Each language file's "cases" (slot: case: words); plurals are listed: "países" and "pais"
# ("pai") are one word once accents are gone.
_CASES: dict[str, dict[str, str]] = {
    slot: {
        normalize(word): case
        for case, words in keyed_word_lists("cases", slot).items()
        for word in words
    }
    for slot in dict.fromkeys(key for found in language_mappings("cases") for key in found)
}
# The scope's phrases all say abroad ("fora do país", "fuera del país").
_CASE_PHRASES = {phrase: "abroad" for phrase, slot in _SLOT_PHRASES.items() if slot == "scope"}


def cases_in(tokens: Sequence[Token]) -> dict[str, frozenset[str]]:
    """Return the cases the tokens are about, by slot, in one name for any language: the
    countries ("place", `places_in`), a parent ("parent": "father", "mother") and home or
    abroad ("scope": "home", "abroad"). A hyphenated word names its parts' cases
    ("licença-maternidade")."""
    words = [t.norm for t in tokens]
    taken: set[int] = set()
    found: dict[str, set[str]] = {}
    for *_span, case in _phrase_spans(words, _CASE_PHRASES, taken):
        found.setdefault("scope", set()).add(case)
    for i, word in enumerate(words):
        if i in taken:
            continue
        for part in word.split("-"):
            for slot, names in _CASES.items():
                if part in names:
                    found.setdefault(slot, set()).add(names[part])
    cases = {slot: frozenset(values) for slot, values in found.items()}
    places = places_in(tokens)
    if places:
        cases["place"] = places
    return cases
