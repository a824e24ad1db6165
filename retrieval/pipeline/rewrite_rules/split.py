"""Split a turn that asks several things into one question per topic."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from retrieval.pipeline.rewrite_rules.cues import CONJUNCTIONS, starts_clause
from retrieval.pipeline.text import Token, token_spans

# A question ends at "?" (Spanish "¿" opens the next) or ";" or a line break.
_SENTENCE_END_RE = re.compile(r"(?<=[?;])\s*|\n+")
_COMMA_RE = re.compile(r",\s*")
# "e com quanta antecedência ...", "y en cuánto tiempo ...", "and for how long ...": a
# preposition before a question word of quantity opens a question too (a cut only here: for
# the follow-up rules "e para quem é PJ?" stays a restriction).
_PREPOSITIONS = frozenset(
    "com em de para pra por ate desde con en hasta in with for by within".split()
)
_QUANTITIES = frozenset("quanto quanta quantos quantas cuanto cuanta cuantos cuantas how".split())


# After "y", a Spanish pronoun before a verb opens a clause: "... y se mantiene el seguro?"
# (only after the conjunction: a mishap told, then whether it is deducted, is one question).
_SPANISH_PRONOUNS = frozenset("se me te nos".split())


def _opens_question(tokens: Sequence[Token], lang: str | None) -> bool:
    if starts_clause(tokens[:2], lang):
        return True
    if lang in ("es", None) and tokens and tokens[0].text.casefold() in _SPANISH_PRONOUNS:
        return True
    words = [t.norm for t in tokens[:3]]
    return len(words) >= 2 and words[0] in _PREPOSITIONS and words[1] in _QUANTITIES


def _has_question_form(text: str, lang: str | None) -> bool:
    tokens = token_spans(text)
    return "?" in text or "¿" in text or starts_clause(tokens, lang)


def _split_on_conjunctions(text: str, lang: str | None) -> list[str]:
    """Cut before "e/y/and" (or a comma) that opens a new clause: "... e o que acontece ...".

    A comma cuts only after a question ("is there a vaccine, how is it spread?"), so that a
    leading condition stays with its question ("se eu sair, quando recebo?").
    """
    tokens = token_spans(text)
    cuts: list[tuple[int, int]] = []  # (end of the left part, start of the right part)
    for i, token in enumerate(tokens[1:], 1):
        # The surface form: Portuguese "é" (is) normalises to "e" (and).
        if token.text.casefold() in CONJUNCTIONS and _opens_question(tokens[i + 1 : i + 4], lang):
            cuts.append((token.start, tokens[i + 1].start))
    for match in _COMMA_RE.finditer(text):
        right = [t for t in tokens if t.start >= match.end()]
        left = text[: match.start()]
        if starts_clause(right[:2], lang) and starts_clause(token_spans(left)[:2], lang):
            cuts.append((match.start(), match.end()))
    parts: list[str] = []
    cursor = 0
    for left_end, right_start in sorted(cuts):
        if left_end < cursor:
            continue
        parts.append(text[cursor:left_end])
        cursor = right_start
    parts.append(text[cursor:])
    return [p.strip(" ,;") for p in parts if p.strip(" ,;")]


def split_questions(text: str, lang: str | None, has_content: Callable[[str], bool]) -> list[str]:
    """Return the questions asked in `text`; one item when it asks one thing.

    Cuts fall at "?", ";" and line breaks, and before "e"/"y"/"and" that opens a clause
    ("... e o que acontece se ..."), never inside a coordinated noun phrase ("vale-refeição
    e vale-alimentação"). A statement line stays with the question after it, and a piece
    without content words ("if so, how can I do that?") joins its neighbour.
    """
    sentences = [s.strip() for s in _SENTENCE_END_RE.split(text) if s.strip()]
    pieces: list[str] = []
    pending = ""
    for index, sentence in enumerate(sentences):
        sentence = f"{pending} {sentence}".strip() if pending else sentence
        pending = ""
        if not _has_question_form(sentence, lang):
            if index < len(sentences) - 1:
                pending = sentence
                continue
            if pieces:  # a closing remark ("ando corto de plata") explains the question
                pieces[-1] = f"{pieces[-1]} {sentence}"
                continue
        pieces.extend(_split_on_conjunctions(sentence, lang))
    if pending:
        pieces.append(pending)
    merged: list[str] = []
    for piece in pieces:
        if merged and not has_content(piece):
            merged[-1] = f"{merged[-1]} {piece}"
        elif merged and not has_content(merged[-1]):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged or [text.strip()]
