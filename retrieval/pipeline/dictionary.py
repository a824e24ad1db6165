"""The language's own dictionary: which words of a turn are ordinary words of pt, es or en.

The word lists are pyspellchecker's (frequency lists built for spell checking, shipped
inside the PyPI package; nothing is downloaded). A word the dictionary knows is never
"corrected" into a different corpus word, and a glossary entry that is also an ordinary
word ("vale", "note") expands only where it is used as the term.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from .text import LANGUAGES, normalize

# Words seen fewer times than this in the list's source texts are mostly typos themselves.
MIN_COUNT = 3


@lru_cache(maxsize=len(LANGUAGES))
def _words(language: str) -> frozenset[str]:
    from spellchecker import SpellChecker  # imported on first use: loading takes a second

    frequencies = SpellChecker(language=language, distance=1).word_frequency.dictionary
    return frozenset(normalize(w) for w, count in frequencies.items() if count >= MIN_COUNT)


def known_words(words: Iterable[str], language: str | None) -> frozenset[str]:
    """Return the (normalised) words that the language's dictionary knows.

    Without a language, a word counts as known when any of the three dictionaries knows it.
    """
    languages = [language] if language in LANGUAGES else list(LANGUAGES)
    wanted = {normalize(w) for w in words}
    found: set[str] = set()
    for code in languages:
        assert code is not None
        found |= wanted & _words(code)
    return frozenset(found)
