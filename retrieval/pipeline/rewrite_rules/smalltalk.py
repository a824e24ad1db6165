"""Tell thanks, greetings, acknowledgements and goodbyes from questions (pt, es, en).

Small talk is recognised by what it lacks: a short turn with no question in it (no question
mark, no word that opens a question or asks for something) and no word the knowledge base
knows as content. "valeu, salvou meu dia", "perfect, that helps a lot", "gracias, me sirvió"
are small talk whatever their slang; "vale transporte pj" and "prazo reembolso hotel" name
what the pages are about and are searched, and so is "obrigado, e para PJ?". Small talk is
answered politely and searches nothing: searching "obrigado" together with the previous
topic reopened it.

The per-language word lists (`small_talk_words` in languages/<lang>.json) only choose the
reply's kind; a turn needs one of their words, so that "e pra mim" (no kind, no known word)
stays a question.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache, lru_cache

from retrieval.pipeline.languages import phrases, request_words, small_talk_words
from retrieval.pipeline.rewrite_rules.cues import (
    CONJUNCTIONS,
    QUESTION_STARTER_PAIRS,
    QUESTION_STARTERS,
)
from retrieval.pipeline.rewrite_rules.lexicon import edit_distance
from retrieval.pipeline.text import normalize, stopwords_for
from retrieval.pipeline.tuning import tuning

# Letters (any script) and digits: everything else (emoji, punctuation) is ignored.
_WORD_RE = re.compile(r"[^\W_]+")
# What ends a clause: a word after it opens a new one ("obrigado, como peço...").
_CLAUSE_RE = re.compile(r"[,;:.!¡¿…\n]+")
# Kinds in order of precedence when a turn mixes them ("ok, obrigado!" thanks).
_PRECEDENCE = ("thanks", "farewell", "greeting", "ack")
# Placeholder for a matched multi-word small-talk phrase ("tudo bem", "makes sense").
_PHRASE = "\x00"


@cache
def _lists() -> tuple[dict[str, str], dict[tuple[str, ...], str]]:
    """Each small-talk word's kind and each phrase's, normalised, from the language files."""
    words: dict[str, str] = {}
    multi: dict[tuple[str, ...], str] = {}
    for kind, entries in small_talk_words().items():
        for entry in entries:
            parts = tuple(normalize(entry).split())
            if len(parts) == 1:
                words.setdefault(parts[0], kind)
            elif parts:
                multi.setdefault(parts, kind)
    return words, multi


@cache
def _asking_words() -> tuple[frozenset[str], frozenset[str]]:
    """Words that open a question (at a clause's start) and words that ask anywhere."""
    starters = frozenset(w for words in QUESTION_STARTERS.values() for w in words)
    return starters, frozenset(normalize(" ".join(request_words())).split())


@lru_cache(maxsize=4096)
def _kind_of(word: str, fuzzy: bool = True) -> str | None:
    """Return the small-talk kind of one word, forgiving a typo in a long one ("obrigadp").

    Cached: a word unknown to the lists is compared with each long small-talk word.
    """
    kinds, _ = _lists()
    kind = kinds.get(word)
    if kind is not None or len(word) < 6 or not fuzzy:
        return kind
    # Repeated letters ("obrigadooo", "valeeeu") and one slip of the finger.
    squeezed = re.sub(r"(.)\1+", r"\1", word)
    kind = kinds.get(squeezed)
    if kind is not None:
        return kind
    for known, known_kind in kinds.items():
        if len(known) >= 6 and abs(len(known) - len(word)) <= 1 and edit_distance(word, known) <= 1:
            return known_kind
    return None


def _clauses(text: str) -> list[list[str]]:
    """The turn's clauses as normalised words, split at punctuation and at "e"/"y"/"and".

    A conjunction stays as its clause's first word; a multi-word small-talk phrase becomes
    one placeholder word with its kind.
    """
    _, multi = _lists()
    clauses: list[list[str]] = []
    for piece in _CLAUSE_RE.split(text):
        words = [normalize(w) for w in _WORD_RE.findall(piece)]
        words = [re.sub(r"(.)\1{2,}", r"\1", w) for w in words]  # "obrigadooo", "valeuuu"
        current: list[str] = []
        i = 0
        while i < len(words):
            found = next((p for p in multi if tuple(words[i : i + len(p)]) == p), None)
            if found is not None:
                current.append(_PHRASE + multi[found])
                i += len(found)
                continue
            if words[i] in CONJUNCTIONS and current:
                clauses.append(current)
                current = []
            current.append(words[i])
            i += 1
        if current:
            clauses.append(current)
    return clauses


def _word_kinds(words: Sequence[str], knows: Callable[[str], bool] | None) -> dict[str, str | None]:
    """Each word's small-talk kind; a misspelt one ("obrigadp") only where the knowledge
    base does not know the word as content."""
    stop = stopwords_for(None)
    kinds: dict[str, str | None] = {}
    for word in words:
        if word.startswith(_PHRASE):
            kinds[word] = word[1:]
            continue
        known = knows is not None and word not in stop and knows(word)
        kinds[word] = _kind_of(word, fuzzy=not known)
    return kinds


def _asks(clause: Sequence[str], kinds: dict[str, str | None]) -> bool:
    """Tell whether a clause asks something: a word of request anywhere, a question opener
    as its first word besides small talk, or a conjunction that adds no small talk ("ok, e
    pra mim": a follow-up without its question mark)."""
    starters, requests = _asking_words()
    if any(w in requests and kinds[w] is None for w in clause):
        return True
    if clause[0] in CONJUNCTIONS and len(clause) > 1:
        if all(kinds[w] is None for w in clause[1:]):
            return True
    rest = [w for w in clause if kinds[w] is None and w not in CONJUNCTIONS]
    if not rest:
        return False
    return rest[0] in starters or (len(rest) > 1 and (rest[0], rest[1]) in QUESTION_STARTER_PAIRS)


def small_talk_kind(text: str, knows: Callable[[str], bool] | None = None) -> str | None:
    """Return "thanks", "greeting", "farewell" or "ack" when the turn is small talk, else None.

    `knows(word)` tells whether the knowledge base knows a word as content; without it
    every word outside the small-talk lists and the stop words counts as content. An empty
    turn, or one of emoji alone ("👍"), is an acknowledgement.
    """
    clauses = _clauses(text)
    words = [w for clause in clauses for w in clause]
    if not words:
        return "ack" if text.strip() and "?" not in text else None
    if len(words) > tuning().small_talk_max_words:
        return None
    kind_of = _word_kinds(words, knows)
    kinds = [k for k in kind_of.values() if k is not None]
    if not kinds:
        return None  # nothing says which kind: "e pra mim" may be a question
    if any(_asks(clause, kind_of) for clause in clauses):
        return None
    if "?" in text and set(kinds) != {"greeting"}:
        return None  # "ok?", "obrigado?" ask something; "tudo bem?" is a greeting
    stop = stopwords_for(None)
    others = 0
    for word in words:
        if kind_of[word] is not None or word in CONJUNCTIONS:
            continue
        if any(c.isdigit() for c in word):
            return None  # a number is asked about: "ok, e 2024"
        if word in stop:
            continue
        if knows is None or knows(word):
            return None  # a word the pages are about: "ok vale transporte pj"
        others += 1
    if len(kinds) < tuning().small_talk_share * (len(kinds) + others):
        return None  # mostly words of its own: a question the pages may not cover
    return next(k for k in _PRECEDENCE if k in kinds)


def small_talk_reply(kind: str, language: str | None) -> str:
    """Return the short, polite reply to a small-talk turn, in the turn's language."""
    replies = phrases(language).small_talk_replies
    return replies.get(kind) or replies["ack"]
