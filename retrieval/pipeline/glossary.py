"""Find company acronyms and slang in a text and expand them (pure, no I/O).

Matching is on whole words, ignoring case and accents: the term "VR" matches "vr", "Vr."
and "VR", "13º" matches "13o", "home office" matches "home-office", and "home" never
matches inside "homem". Hyphens count as spaces so both spellings of a compound match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from retrieval.pipeline.text import ALL_STOPWORDS, Token, normalize, token_spans
from retrieval.pipeline.types import GlossaryEntry, GlossaryHit

_LANGUAGE_CODE = re.compile(r"(?:[A-Za-z]{2,3})?")


@dataclass(frozen=True)
class _Match:
    first: int  # index of the first word in the text's word list
    last: int  # index of the last word (inclusive)
    start: int  # character span in the text
    end: int
    entry: GlossaryEntry


@dataclass(frozen=True)
class _Word:
    token: Token
    inside_left: bool = False  # joined by a hyphen to the word before
    inside_right: bool = False  # joined by a hyphen to the word after


@lru_cache(maxsize=256)
def _words_with_spans(text: str) -> tuple[_Word, ...]:
    """Split tokens on hyphens so "home-office" and "home office" give the same words.

    Cached: a rewrite matches each query, the question and every expansion, often twice.
    """
    words: list[_Word] = []
    for token in token_spans(text):
        parts = token.text.split("-")
        offset = token.start
        for index, part in enumerate(parts):
            if part:
                piece = Token(part, normalize(part), offset, offset + len(part))
                words.append(_Word(piece, index > 0, index < len(parts) - 1))
            offset += len(part) + 1
    return tuple(words)


@lru_cache(maxsize=4096)
def _term_words(term: str) -> tuple[str, ...]:
    # Cached: every turn matches the whole glossary against the question and its history.
    return tuple(w.token.norm for w in _words_with_spans(term))


def _is_plain_word(token: Token) -> bool:
    """Tell whether a lower-case token is an everyday word ("uma", "ir", "va").

    An acronym such as "UMA" or "IR" then matches only when written in capitals.
    """
    return not token.text.isupper() and token.norm in ALL_STOPWORDS


def _find_matches(text: str, entries: Iterable[GlossaryEntry]) -> list[_Match]:
    """Return non-overlapping matches, preferring the longest, then the leftmost."""
    words = _words_with_spans(text)
    norms = [w.token.norm for w in words]
    present = set(norms)
    candidates: list[_Match] = []
    for entry in entries:
        pattern = _term_words(entry.term)
        size = len(pattern)
        if not size or pattern[0] not in present:
            continue
        acronym = entry.term.isupper()
        for i in range(len(norms) - size + 1):
            last = i + size - 1
            if tuple(norms[i : i + size]) != pattern:
                continue
            # "vale" must not match inside "vale-refeição"; "home office" may cover all of
            # "home-office".
            if words[i].inside_left or words[last].inside_right:
                continue
            if acronym and size == 1 and _is_plain_word(words[i].token):
                continue
            candidates.append(_Match(i, last, words[i].token.start, words[last].token.end, entry))
    candidates.sort(key=lambda m: (-(m.last - m.first), m.first))
    taken: set[int] = set()
    chosen: list[_Match] = []
    for match in candidates:
        span = set(range(match.first, match.last + 1))
        if span & taken:
            continue
        taken |= span
        chosen.append(match)
    chosen.sort(key=lambda m: m.first)
    return chosen


def find_glossary_hits(
    text: str,
    entries: Sequence[GlossaryEntry],
    source: Literal["question", "history"] = "question",
) -> list[GlossaryHit]:
    """Return the glossary terms found in `text`, in order of appearance, without repeats."""
    hits: list[GlossaryHit] = []
    seen: set[tuple[tuple[str, ...], str]] = set()
    for match in _find_matches(text, entries):
        entry = match.entry
        key = (_term_words(entry.term), normalize(entry.expansion))
        if key in seen:
            continue
        seen.add(key)
        hits.append(GlossaryHit(entry.term, entry.expansion, entry.area, source))
    return hits


def glossary_in_language(
    entries: Iterable[GlossaryEntry], language: str
) -> tuple[GlossaryEntry, ...]:
    """The entries that expand a turn in `language`: those of that language, and those of
    every language ("") for the terms that have none of their own."""
    entries = list(entries)
    own = {_term_words(e.term) for e in entries if e.language == language}
    return tuple(
        e
        for e in entries
        if e.language == language or (not e.language and _term_words(e.term) not in own)
    )


def _contains_phrase(text: str, phrase: str) -> bool:
    """Tell whether the words of `phrase` occur in `text` as a run of whole words."""
    haystack = [w.token.norm for w in _words_with_spans(text)]
    needle = [w.token.norm for w in _words_with_spans(phrase)]
    if not needle:
        return True
    size = len(needle)
    return any(haystack[i : i + size] == needle for i in range(len(haystack) - size + 1))


def expand_with_glossary(text: str, hits: Sequence[GlossaryHit]) -> str:
    """Insert each hit's expansion in brackets after the first occurrence of its term.

    An expansion already present in the text ("VR (vale-refeição)", or the user spelled
    it out) is not added again.
    """
    entries = [GlossaryEntry(h.term, h.expansion, h.area) for h in hits]
    insertions: list[tuple[int, str]] = []
    done: set[str] = set()
    for match in _find_matches(text, entries):
        expansion = match.entry.expansion.strip()
        key = normalize(expansion)
        if not expansion or key in done or _contains_phrase(text, expansion):
            continue
        done.add(key)
        insertions.append((match.end, f" ({expansion})"))
    for position, insert in sorted(insertions, reverse=True):
        text = text[:position] + insert + text[position:]
    return text


def _entry_from_object(item: object, index: int) -> GlossaryEntry | None:
    if not isinstance(item, dict):
        raise ValueError(f"glossary item {index} must be an object, got {type(item).__name__}")
    term, expansion = item.get("term"), item.get("expansion")
    area, active = item.get("area"), item.get("active", True)
    language = item.get("language") or ""
    if not isinstance(term, str) or not term.strip():
        raise ValueError(f"glossary item {index}: 'term' must be a non-empty string")
    if not isinstance(expansion, str) or not expansion.strip():
        raise ValueError(
            f"glossary item {index} ({term!r}): 'expansion' must be a non-empty string"
        )
    if area is not None and not isinstance(area, str):
        raise ValueError(f"glossary item {index} ({term!r}): 'area' must be a string or null")
    if not isinstance(active, bool):
        raise ValueError(f"glossary item {index} ({term!r}): 'active' must be true or false")
    if not isinstance(language, str) or not _LANGUAGE_CODE.fullmatch(language):
        raise ValueError(
            f"glossary item {index} ({term!r}): 'language' must be a language code "
            'such as "pt", or empty for every language'
        )
    if not active:
        return None
    return GlossaryEntry(
        term.strip(), expansion.strip(), area.strip() if area else None, language.lower()
    )


def parse_glossary_json(data: object) -> list[GlossaryEntry]:
    """Read a glossary from `{"TERM": "expansion"}` or `[{"term", "expansion", ...}]`.

    List items may carry "area", "language" (the turns' language it expands; none: every
    language) and "active"; inactive ones are skipped.
    Raise ValueError naming the offending item on bad input.
    """
    if isinstance(data, dict):
        entries: list[GlossaryEntry] = []
        for term, expansion in data.items():
            if not isinstance(term, str) or not term.strip():
                raise ValueError(f"glossary term {term!r} must be a non-empty string")
            if not isinstance(expansion, str) or not expansion.strip():
                raise ValueError(f"glossary term {term!r}: expansion must be a non-empty string")
            entries.append(GlossaryEntry(term.strip(), expansion.strip()))
        return entries
    if isinstance(data, list):
        parsed = (_entry_from_object(item, i) for i, item in enumerate(data))
        return [entry for entry in parsed if entry is not None]
    raise ValueError(
        "glossary must be an object {term: expansion} or a list of "
        f"{{term, expansion, area?, language?, active?}} objects, got {type(data).__name__}"
    )


def glossary_to_json(entries: Iterable[GlossaryEntry]) -> list[dict[str, str | None]]:
    """Return the list form that `parse_glossary_json` reads back."""
    return [
        {"term": e.term, "expansion": e.expansion, "area": e.area, "language": e.language or None}
        for e in entries
    ]
