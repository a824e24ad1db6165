"""The language's own dictionary: which words of a turn are ordinary words of its language.

A language file names its dictionary ("spelling_dictionary": "pt"); a language without one
has none here. The word lists are pyspellchecker's (frequency lists built for spell
checking, shipped inside the PyPI package; nothing is downloaded). A word the dictionary
knows is never "corrected" into a different corpus word, and a glossary entry that is also
an ordinary word ("vale", "note") expands only where it is used as the term.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from .languages import language_data
from .text import LANGUAGES, normalize

# Words seen fewer times than this in the list's source texts are mostly typos themselves.
MIN_COUNT = 3


@lru_cache(maxsize=max(len(LANGUAGES), 1))
def _words(language: str) -> frozenset[str]:
    name = language_data(language).get("spelling_dictionary")
    if not name:
        return frozenset()
    from spellchecker import SpellChecker  # imported on first use: loading takes a second

    frequencies = SpellChecker(language=str(name), distance=1).word_frequency.dictionary
    return frozenset(normalize(w) for w, count in frequencies.items() if count >= MIN_COUNT)


def known_words(words: Iterable[str], language: str | None) -> frozenset[str]:
    """Return the (normalised) words that the language's dictionary knows.

    Without a language, a word counts as known when any language's dictionary knows it.
    """
    languages = [language] if language in LANGUAGES else list(LANGUAGES)
    wanted = {normalize(w) for w in words}
    found: set[str] = set()
    for code in languages:
        assert code is not None
        found |= wanted & _words(code)
    return frozenset(found)
