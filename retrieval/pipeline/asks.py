"""What a question asks for, from its wording (pure): a duration, an amount, a condition or
the steps of a request.

The answer lifts the lines that state it; the words that ask it ("prazo", "quanto",
"posso") name no topic, so the readings of a short question are not told apart by them.
"""

from __future__ import annotations

import re
from typing import Literal

from .languages import every_word_list
from .text import normalize, token_spans

AnswerKind = Literal["duration", "amount", "condition", "steps"]

# The words and phrases of each language file's "asks" (retrieval/pipeline/languages):
# what a question asks for, normalised, whatever the turn's language (a Spanish page may be
# asked about in Portuguese). Tried in this order: "quanto tempo" is a duration before
# "quanto" is an amount, and "quanto demora" an amount before "demora" a duration.
_KIND_ORDER: tuple[tuple[AnswerKind, str], ...] = (
    ("duration", "duration"),
    ("amount", "amount"),
    ("duration", "duration_after_amount"),
    ("steps", "steps"),
    ("condition", "condition"),
)
_SECTION = "asks"


def _all(*path: str) -> tuple[str, ...]:
    """One list of every language file's "asks" at `path`, normalised, once each."""
    return tuple(
        dict.fromkeys(" ".join(normalize(p).split()) for p in every_word_list(_SECTION, *path))
    )


_CUE_PHRASES: tuple[tuple[AnswerKind, tuple[str, ...]], ...] = tuple(
    (kind, _all("kinds", name)) for kind, name in _KIND_ORDER
)
# "como" asks how only where a clause starts ("como peço", "e como incluo"); inside one it
# compares ("conta como extra", "tanto como").
_CLAUSE_ONLY = frozenset(_all("clause_only"))
_CLAUSE_START = (
    r"(?:^|[,;:!?.]\s*|\b(?:" + "|".join(re.escape(w) for w in _all("clause_openers")) + r")\s+)"
)


def _cue_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    anywhere = [re.escape(p) for p in phrases if p not in _CLAUSE_ONLY]
    alternatives = [r"\b(?:" + "|".join(anywhere) + r")\b"] if anywhere else []
    alternatives += [_CLAUSE_START + re.escape(p) + r"\b" for p in phrases if p in _CLAUSE_ONLY]
    return re.compile("|".join(alternatives) or r"(?!)")  # (?!) matches nothing


_KIND_CUES: tuple[tuple[AnswerKind, re.Pattern[str]], ...] = tuple(
    (kind, _cue_pattern(phrases)) for kind, phrases in _CUE_PHRASES
)
# The units in "quantos dias" name what is counted, a topic word ("banco de horas").
_UNITS = frozenset(_all("units"))
# "quantas vezes" asks how often: "vezes" names no topic (see _topic_tokens).
COUNTING_WORDS = frozenset(_all("counting"))
CUE_WORDS = frozenset(
    w for _, phrases in _CUE_PHRASES for p in phrases for w in p.split() if w not in _UNITS
)
# A period, as a noun or an adjective ("o limite mensal", "el tope anual"): it says how a
# figure is counted, not what it is about.
PERIOD_WORDS = frozenset(_all("periods"))


def names_no_topic(term: str) -> bool:
    """Whether a content word only asks for a kind of answer or says a period ("qual é o
    limite mensal?" asks about whatever the message named before)."""
    word = normalize(term)
    return word in CUE_WORDS or word in PERIOD_WORDS or word in COUNTING_WORDS


# "How does it work" and "what happens if" ask for the rule itself, not for the steps of
# a request ("o que acontece se eu pedir demissão?" names "pedir", a request word): each
# language file's "asks_the_rule_patterns" (regular expressions over normalised words).
_GENERAL = re.compile(r"\b(?:" + "|".join(_all("asks_the_rule_patterns")) + r")\b")


def answer_kind(question: str) -> AnswerKind | None:
    """What the question asks for, from its wording; None when it does not say."""
    text = " ".join(normalize(question).replace("?", " ").split())
    for kind, cue in _KIND_CUES:
        if kind == "steps" and _GENERAL.search(text):
            return None
        if cue.search(text):
            return kind
    return None


# Words that only ask how much or how often ("quantas vezes", "cuánto", "how many times"):
# no page is about them, yet in the full-text leg, weighted by rarity, "vezes" outranked the
# topic (a profit-sharing question asking in how many instalments found another benefit's
# "once a year").
_ASKING = frozenset(_all("asking_how_much"))
_COUNTED_AFTER = frozenset(_all("counted_after"))


def without_asking_words(text: str) -> str:
    """`text` without the words that ask how much or how often, for the full-text leg.

    The vector leg keeps the whole question: only keyword matching is misled by them."""
    tokens = token_spans(text)
    drop = [
        t
        for i, t in enumerate(tokens)
        if t.norm in _ASKING
        or (t.norm in COUNTING_WORDS and i > 0 and tokens[i - 1].norm in _COUNTED_AFTER)
    ]
    if not drop or len(drop) == len(tokens):
        return text
    out, last = [], 0
    for t in drop:
        out.append(text[last : t.start])
        last = t.end
    out.append(text[last:])
    return " ".join("".join(out).split())
