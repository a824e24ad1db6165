"""Small text utilities shared by the pipeline: normalising, tokenising, language guessing.

Pure functions, no I/O. Words are compared in their normalised form (NFKD, accents
stripped, case-folded), so "Férias", "ferias" and "FÉRIAS" are one word and "13º" is "13o".
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

from retrieval.pipeline.languages import (
    language_codes,
    language_data,
    language_text,
    stop_words,
    word_list,
)

from .masking import PLACEHOLDER_PATTERN

# A language is a code with a data file (retrieval/pipeline/languages/<code>.json, or one in
# CHATRAG_LANGUAGE_DIRS): pt, es and en ship; a fourth is a file, not code.
Language = str
LANGUAGES: tuple[Language, ...] = language_codes()

# A word: letters/digits (º and ª count as letters), joined by inner hyphens or apostrophes
# ("e-mail", "home-office", "d'água"); a number keeps its inner separators ("1.500,00");
# a masking placeholder such as "[EMAIL_1]" is one token.
_NUMBER_RE = re.compile(r"\d+(?:[.,/]\d+)+")
_TOKEN_RE = re.compile(
    "|".join((PLACEHOLDER_PATTERN, _NUMBER_RE.pattern, r"[^\W_]+°?(?:[-'’][^\W_]+)*"))
)
_PLACEHOLDER_RE = re.compile(PLACEHOLDER_PATTERN)
_POSSESSIVE_RE = re.compile(r"['’]s$", re.IGNORECASE)


@dataclass(frozen=True)
class Token:
    """A word of a text: its surface form, normalised form and character span."""

    text: str
    norm: str
    start: int
    end: int


def normalize(s: str) -> str:
    """Return `s` decomposed (NFKD), without accents, case-folded."""
    if s.isascii():  # nothing to decompose or strip: the same result, three times faster
        return s.lower()
    # "°" is a common stand-in for "º" (13° salário). Case-folding before decomposing
    # keeps the result stable: "İ" folds to "i" plus a combining dot, stripped here.
    decomposed = unicodedata.normalize("NFKD", s.replace("°", "º").casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def is_placeholder(token: str) -> bool:
    """Tell whether `token` is a masking placeholder such as "[EMAIL_1]"."""
    return bool(_PLACEHOLDER_RE.fullmatch(token))


@lru_cache(maxsize=65536)
def _word_norm(word: str) -> str:
    # Cached: the same few thousand words come back in every text, and a turn's texts are
    # tokenised several times per rewrite (and again in each later turn's history).
    return normalize(word).replace("’", "'")


def token_spans(s: str) -> list[Token]:
    """Return the word tokens of `s` with their spans (English possessive "'s" dropped)."""
    tokens: list[Token] = []
    for match in _TOKEN_RE.finditer(s):
        surface = match.group()
        end = match.end()
        # A placeholder has brackets, which no word has (with or without its "'s").
        if is_placeholder(surface):
            tokens.append(Token(surface, surface, match.start(), end))
            continue
        possessive = _POSSESSIVE_RE.search(surface)
        if possessive and possessive.start() > 0:
            surface = surface[: possessive.start()]
            end = match.start() + len(surface)
        tokens.append(Token(surface, _word_norm(surface), match.start(), end))
    return tokens


_TITLE_SUBJECT_END = re.compile(r"\s+[—–-]\s+|\s*\(")


def title_subject(title: str) -> str:
    """A page title's subject, before its dash or parenthesis: "Assistência médica —
    dependentes" -> "Assistência médica"."""
    return _TITLE_SUBJECT_END.split(title)[0].strip()


def tokenize(s: str) -> list[str]:
    """Return the word tokens of `s` in their surface form ("13º", "e-mail", "VR")."""
    return [t.text for t in token_spans(s)]


def _words(text: str) -> frozenset[str]:
    return frozenset(normalize(text).split())


STOPWORDS: dict[str, frozenset[str]] = {
    # Each language's common words and the chat's own fillers ("quero saber", "tell me"):
    # never a topic. Kept in the language's data file (retrieval/pipeline/languages).
    lang: _words(" ".join(stop_words(lang)))
    for lang in LANGUAGES
}
ALL_STOPWORDS: frozenset[str] = frozenset().union(*STOPWORDS.values())

# Words that belong to one language's list only are evidence for that language.
_MARKERS: dict[str, frozenset[str]] = {
    lang: words - frozenset().union(*(STOPWORDS[o] for o in LANGUAGES if o != lang))
    for lang, words in STOPWORDS.items()
}
# Letters and word endings that only one language writes ("ç", "ñ"; "-ção" / "-ción").
_LETTERS: dict[str, frozenset[str]] = {
    lang: frozenset(language_text(lang, "detect", "letters")) for lang in LANGUAGES
}
_SUFFIXES: dict[str, tuple[str, ...]] = {
    lang: word_list(lang, "detect", "suffixes") for lang in LANGUAGES
}


def stopwords_for(lang: str | None) -> frozenset[str]:
    """Return the stopwords of `lang`, or of every language when it is unknown."""
    if lang in STOPWORDS:
        return STOPWORDS[lang]
    return ALL_STOPWORDS


def detect_language(s: str) -> Language | None:
    """Guess the language from its own stop words, letters and word endings; None when
    unsure (no evidence, or two languages alike)."""
    scores: dict[Language, float] = dict.fromkeys(LANGUAGES, 0.0)
    lowered = s.casefold()
    for lang in LANGUAGES:
        scores[lang] += 2 * sum(c in _LETTERS[lang] for c in lowered)
    for token in token_spans(s):
        for lang in LANGUAGES:
            if token.norm in _MARKERS[lang]:
                scores[lang] += 1
            if len(token.norm) > 5 and _SUFFIXES[lang]:
                scores[lang] += token.norm.endswith(_SUFFIXES[lang])
    if len(scores) < 2:
        return next(iter(scores)) if scores and max(scores.values()) >= 1 else None
    ranked = sorted(scores.items(), key=lambda item: item[1], reverse=True)
    (best, top), (_, second) = ranked[0], ranked[1]
    if top < 1 or top == second:
        return None
    return best


def is_content_word(norm: str, stopwords: frozenset[str]) -> bool:
    """Tell whether a normalised token carries meaning for search."""
    if norm in stopwords or is_placeholder(norm):
        return False
    if len(norm) < 2 and not norm.isdigit():
        return False
    return any(c.isalnum() for c in norm)


def content_terms(s: str, lang: str | None = None) -> list[str]:
    """Return the normalised tokens of `s` that are not stopwords, in order.

    With no `lang`, the language is detected; when that fails, the stopwords of every
    language are removed.
    """
    stopwords = stopwords_for(lang if lang in STOPWORDS else detect_language(s))
    return [t.norm for t in token_spans(s) if is_content_word(t.norm, stopwords)]


# Chat-template control tokens (ChatML, Llama 3, Llama 2, Gemma, Phi) and the tags the prompts
# use to fence passages and the question. In text from users or documents they are inert to a
# careful server, but some servers parse special tokens inside message content.
_PROMPT_MARKUP_RE = re.compile(
    r"<\|[^|<>\n]{0,40}\|>"
    r"|\[/?INST\]|<</?SYS>>|</?s>|<(?:start|end)_of_turn>"
    r"|<\s*/?\s*(?:passages|question|system|assistant|user)\s*>",
    re.IGNORECASE,
)
_DEFANG = str.maketrans({"<": "‹", ">": "›", "[": "‹", "]": "›"})


def defang_prompt_markup(text: str) -> str:
    """Make chat-template tokens and the prompts' own fence tags in untrusted text inert.

    They stay readable ("‹|im_start|›", "‹/passages›") but no longer open a turn or close a
    fence; the result has no such markup left, so defanging twice changes nothing.
    """
    return _PROMPT_MARKUP_RE.sub(lambda m: m.group(0).translate(_DEFANG), text)


@dataclass(frozen=True)
class _Stemming:
    """How a language's words meet their stem (its file's "snowball" and "stemming")."""

    snowball: str
    before: tuple[tuple[str, str], ...]  # word endings replaced before stemming
    plural_fold: bool  # a short plural Snowball leaves whole meets its singular
    after: tuple[tuple[str, str], ...]  # letters replaced in the stem


def _stemming(language: str) -> _Stemming:
    data = language_data(language)
    rules = data.get("stemming", {})
    return _Stemming(
        snowball=str(data.get("snowball", "porter")),
        before=tuple((str(a), str(b)) for a, b in rules.get("before", ())),
        plural_fold=bool(rules.get("plural_fold", False)),
        after=tuple((str(a), str(b)) for a, b in rules.get("after", ())),
    )


_STEMMING: dict[str, _Stemming] = {lang: _stemming(lang) for lang in LANGUAGES}
# A word of no known language meets its stem by the first language's Snowball alone.
_PLAIN = _Stemming(_STEMMING[LANGUAGES[0]].snowball if LANGUAGES else "porter", (), False, ())


@lru_cache(maxsize=16)
def _stemmer(snowball: str) -> snowballstemmer.BaseStemmer:
    return snowballstemmer.stemmer(snowball)


# A plural's final "s", not that of "mais", "bônus", "país" or "classe".
_BARE_PLURAL = re.compile(r"[^siu]s$")


@lru_cache(maxsize=65536)
def stem(word: str, language: str) -> str:
    """The language's Snowball stem ("agendo", "agendamento" -> "agend"), accents off, then
    at most six letters, so that a word typed without its accents ("solicitacao") still
    meets the document's ("solicitação")."""
    word = word.casefold()
    if word.isdigit() or len(word) <= 3:
        return normalize(word)
    if _NUMBER_RE.fullmatch(word):  # "1.500,00": no letters for the stemmer (as it returns)
        return word[:6]
    rules = _STEMMING.get(language, _PLAIN)
    stemmer = _stemmer(rules.snowball)
    for ending, replacement in rules.before:
        if word.endswith(ending):
            word = word[: -len(ending)] + replacement  # "viagens" / "viagem", "bens" / "bem"
            break
    root = normalize(str(stemmer.stemWord(word)))
    if rules.plural_fold and root == normalize(word) and _BARE_PLURAL.search(root):
        # Snowball leaves a short plural whole ("voos", "dias", "anos", "extras"): it
        # meets its singular without the "s".
        root = normalize(str(stemmer.stemWord(word[:-1])))
    for letters, replacement in rules.after:
        # A stressed Spanish o/e becomes ue/ie ("descontar" / "descuenta", "pedir" /
        # "pide", "perder" / "pierde"): both forms meet at the plain vowel.
        root = root.replace(letters, replacement)
    return root[:6]
