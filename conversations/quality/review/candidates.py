"""Guess which word of a badly answered question the glossary is missing (pure, no I/O).

A vocabulary gap usually shows as a word the documents never use: a company acronym ("RD"),
slang or a misspelt term. Candidates, best first:
- upper-case acronyms the collection does not know (or knows barely),
- other words the collection does not know,
- rare words (in at most `rare_df` passages).
Words already in the glossary, stopwords, numbers and masking placeholders are never offered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from retrieval.pipeline.text import ALL_STOPWORDS, Token, is_placeholder, normalize, token_spans

# The vocabulary table splits words the same way (retrieval.ingestion.services).
_VOCABULARY_SPLIT = re.compile(r"[^a-z0-9]+")


def vocabulary_words(text: str) -> set[str]:
    """The words of `text` in the form the collection's vocabulary stores them."""
    words: set[str] = set()
    for token in _content_tokens(text):
        words.update(_parts(token))
    return words


def glossary_candidates(
    question: str,
    *,
    df: Mapping[str, int],
    glossary_terms: Iterable[str],
    rare_df: int = 1,
    limit: int = 3,
) -> list[str]:
    """Return up to `limit` words of `question` worth a glossary entry, best first."""
    known_terms = {" ".join(normalize(t).split()) for t in glossary_terms}
    ranked: list[tuple[int, int, int, str]] = []
    seen: set[str] = set()
    for position, token in enumerate(_content_tokens(question)):
        if token.norm in seen or token.norm in known_terms:
            continue
        seen.add(token.norm)
        parts = _parts(token)
        if not parts:
            continue
        frequency = min(df.get(part, 0) for part in parts)
        acronym = _is_acronym(token.text)
        if frequency > rare_df:
            continue
        # Acronyms first, then unknown before rare, then the order of the question.
        ranked.append((0 if acronym else 1, frequency, position, token.text))
    ranked.sort()
    return [text for *_, text in ranked[:limit]]


def _content_tokens(text: str) -> list[Token]:
    return [
        t
        for t in token_spans(text)
        if not is_placeholder(t.text)
        # "IR" or "UMA" in capitals may be an acronym; in lower case they are plain words.
        and (t.norm not in ALL_STOPWORDS or _is_acronym(t.text))
        and not t.norm.replace(".", "").replace(",", "").replace("/", "").isdigit()
        and (len(t.norm) >= 2)
    ]


def _parts(token: Token) -> list[str]:
    return [p for p in _VOCABULARY_SPLIT.split(token.norm) if len(p) >= 2]


def _is_acronym(surface: str) -> bool:
    letters = [c for c in surface if c.isalpha()]
    return 2 <= len(surface) <= 8 and bool(letters) and all(c.isupper() for c in letters)
