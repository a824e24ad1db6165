"""Corpus statistics for one turn: how informative a word is, and spelling fixes."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rapidfuzz.distance import OSA

from retrieval.pipeline.text import is_placeholder, token_spans
from retrieval.pipeline.tuning import tuning
from retrieval.pipeline.types import LexiconView

# Normalised IDF (0 = in every chunk, 1 = in one chunk) above which a word names a topic
# on its own, and below which it is too common to carry: in a 10,000-chunk corpus a word
# in at most ~160 chunks (N^0.55) is strong, one in over 1,000 (N^0.75) is common.
# Chosen on the MTRAG development data; 0.4-0.6 behaved alike there.


_PART_SPLIT_RE = re.compile(r"[^a-z0-9]+")


def word_parts(word: str) -> list[str]:
    """Return the pieces the corpus counts for a compound ("vale-refeicao", "d'agua").

    The vocabulary splits on anything that is not a letter or digit; a plain word gives [].
    """
    parts = [p for p in _PART_SPLIT_RE.split(word) if len(p) > 1]
    return parts if parts != [word] else []


@dataclass(frozen=True)
class Stats:
    """Read-only helper over a LexiconView."""

    lexicon: LexiconView

    @property
    def available(self) -> bool:
        """Tell whether the caller gave corpus statistics at all."""
        return self.lexicon.n_chunks > 1 and bool(self.lexicon.df)

    def _df(self, word: str) -> int | None:
        df = self.lexicon.df.get(word)
        if df is None and word in self.lexicon.corrections:
            df = self.lexicon.df.get(self.lexicon.corrections[word])
        return df

    def nidf(self, word: str) -> float | None:
        """Return the word's IDF scaled to 0..1, or None when the corpus does not know it.

        A compound unknown as a whole ("home-office") takes its rarest known part.
        """
        n = self.lexicon.n_chunks
        if n < 2:
            return None
        df = self.lexicon.df.get(word)
        if df is None:
            # A compound's known parts before any spelling guess for the whole: the
            # lexicon's nearest word to "auxilio-creche" is "auxilio", far more common.
            known = [d for d in map(self._df, word_parts(word)) if d]
            df = min(known) if known else self._df(word)
        if not df:
            return None
        return max(0.0, math.log(n / min(df, n)) / math.log(n))

    def weight(self, word: str) -> float:
        """Return how much a word tells about a topic; without statistics every word is 0.6."""
        if not self.available:
            return 0.6
        value = self.nidf(word)
        return 0.0 if value is None else value

    def is_strong(self, word: str) -> bool:
        """Tell whether a word names a topic by itself (rare enough in the corpus)."""
        return self.weight(word) >= tuning().strong


def edit_distance(a: str, b: str) -> int:
    """Return the optimal-string-alignment distance (a swap of neighbours counts once)."""
    return int(OSA.distance(a, b))


def _plausible_fix(word: str, fix: str) -> bool:
    """Accept only small edits: trigram neighbours can be unrelated words."""
    if not fix or fix == word or not fix.replace("-", "").isalpha():
        return False
    # "leva" -> "levar", "ganho" -> "ganha": another form of the same word, not a typo;
    # and typos rarely lose the first letter ("demitido" is not "emitido").
    if fix.startswith(word) or word.startswith(fix) or fix[0] != word[0]:
        return False
    if word[:-1] == fix[:-1] and word[-1] in "aeio" and fix[-1] in "aeio":
        return False
    limit = 1 if len(word) <= 5 else 2
    return edit_distance(word, fix) <= limit


def correct_spelling(
    text: str, stats: Stats, protected: frozenset[str], stopwords: frozenset[str]
) -> tuple[str, dict[str, str]]:
    """Replace words unknown to the corpus and to the language by the closest corpus word.

    "apagam" (a verb the dictionary knows) is not turned into "apagado"; "reenbolso" is.

    Never touches stopwords, glossary words (`protected`), numbers, placeholders, short
    words or acronyms written in capitals.
    """
    if not stats.available:
        return text, {}
    corrections: dict[str, str] = {}
    pieces: list[str] = []
    cursor = 0
    for token in token_spans(text):
        word = token.norm
        if (
            word in stopwords
            or word in protected
            or word in stats.lexicon.df
            or word in stats.lexicon.language_words
            or is_placeholder(token.text)
            or len(word) < 4
            or not word.isalpha()
            or token.text.isupper()
        ):
            continue
        fix = stats.lexicon.corrections.get(word, "")
        if not _plausible_fix(word, fix):
            continue
        corrections[word] = fix
        replacement = fix.capitalize() if token.text[:1].isupper() else fix
        pieces.append(text[cursor : token.start] + replacement)
        cursor = token.end
    pieces.append(text[cursor:])
    return "".join(pieces), corrections
