"""Language cues that tell whether a turn leans on the conversation (pt, es, en).

Words are in normalised form (no accents, case-folded) unless a name says "surface": a
few Portuguese and Spanish words differ from a verb only by an accent ("esta"/"está").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from retrieval.pipeline.languages import every_word_list, language_text, word_list
from retrieval.pipeline.text import LANGUAGES, Token, normalize, token_spans

_LANGS: tuple[str, ...] = LANGUAGES
_SECTION = "cues"


def _words(lang: str, name: str, *, surface: bool = False) -> frozenset[str]:
    """One of the language file's cue lists: normalised words, or as written but case-folded
    for a list of surface forms (a few words differ from a verb only by an accent)."""
    return frozenset(
        w.casefold() if surface else normalize(w) for w in word_list(lang, _SECTION, name)
    )


def _phrases(lang: str, name: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(normalize(p).split()) for p in word_list(lang, _SECTION, name))


def _per_language(name: str, *, surface: bool = False) -> dict[str, frozenset[str]]:
    return {lang: _words(lang, name, surface=surface) for lang in _LANGS}


def _every_language(name: str) -> frozenset[str]:
    return frozenset(normalize(w) for w in every_word_list(_SECTION, name))


def _every_languages_phrases(name: str) -> tuple[tuple[str, ...], ...]:
    return tuple(
        dict.fromkeys(tuple(normalize(p).split()) for p in every_word_list(_SECTION, name))
    )


def _clitic(lang: str) -> re.Pattern[str]:
    """A verb with a pronoun attached ("pedi-lo", "pedirlo"); a language without clitics has
    none ((?!) matches nothing)."""
    return re.compile(language_text(lang, _SECTION, "clitic_pattern") or r"(?!)")


# The cue words of each language file's "cues" (retrieval/pipeline/languages/<lang>.json).
# Pronouns and demonstratives that point back at something said before.
ANAPHORS = _per_language("anaphors")
# Demonstratives that are also verb forms without their accent: count them only as
# determiners, written without the accent and followed by a content word ("esta regra").
DETERMINERS_SURFACE = _per_language("determiners_surface", surface=True)
# "esta semana", "this week": deictic time, not a reference to the conversation.
_TIME_WORDS = _every_language("time_words")
# Pronouns only in their written form ("lá"; Spanish "le"/"les" are only ever pronouns).
SURFACE_ANAPHORS = _per_language("surface_anaphors", surface=True)
# Object pronouns before the verb (Spanish): two together ("me la pueden adelantar?") or one
# opening the turn before a verb of asking ("lo puedo pedir?") point back at a thing; the
# noun left out before "de" ("la de junio"), except for the neuter pronoun.
_OBJECT = _per_language("object_pronouns")
_NEUTER_OBJECT = _per_language("neuter_object_pronouns")
_DATIVE = _per_language("dative_pronouns")
_OF = _per_language("of")
_VERBS_AFTER = _per_language("verbs_after_object")
# "¿a quién le pido...?": the pronoun doubles the "quién" beside it, nothing said before.
_DOUBLED_BY = _per_language("doubled_by")
# Two-word references: "o mesmo", "lo mismo", "the same".
ANAPHOR_PHRASES = {lang: _phrases(lang, "anaphor_phrases") for lang in _LANGS}
# Words that, ending a clause, leave out what they refer to ("...pedir demissão no meio").
DANGLING = _per_language("dangling")
_CLITIC_RE = {lang: _clitic(lang) for lang in _LANGS}
# A pronoun that refers to nothing: "is it possible to...", "is it worth...".
_EXPLETIVE = _per_language("expletive_pronouns")
_EXPLETIVE_NEXT = _per_language("expletive_next")
# A demonstrative that points back unless a time word follows ("this" / "this week").
_POINTING_UNLESS_TIME = _per_language("pointing_unless_time")
# A word that is a pronoun after these words, a conjunction otherwise ("about that").
_PRONOUN_THAT = _per_language("pronoun_that")
_THAT_PRONOUN_AFTER = _per_language("pronoun_that_after")
# A locative pronoun ("there"), unless a form of "to be" is beside it ("is there").
_LOCATIVE = _per_language("locative_pronouns")
_BE = _per_language("be_forms")

# Turn openers that continue the previous question: "e para PJ?", "y en Chile?".
OPENERS = {lang: _phrases(lang, "openers") for lang in _LANGS}
# Openers of a hypothetical ("e se eu estiver de férias?"): they always continue.
_HYPOTHETICAL = _every_language("hypothetical")
# Phrases that ask about the previous topic without naming it ("muda alguma coisa se...").
_CONTINUATIONS = _every_languages_phrases("continuations")
# Leading chatter skipped before looking for an opener: "ok, e para PJ?".
_LEAD_FILLER = _every_language("lead_fillers")
# Explicit topic changes: "mudando de assunto", "changing the subject".
_SWITCH_VERBS = _every_language("switch_verbs")
_SWITCH_NOUNS = _every_language("switch_nouns")
_SWITCH_PHRASES = _every_languages_phrases("switch_phrases")
# "e sobre …", "y sobre …", "e acerca de …": a subject of its own unless it is a facet.
_ABOUT_OPENERS = frozenset(_every_languages_phrases("about_openers"))
_ARTICLES = _every_language("articles")
# Phrases that change the subject only where a turn starts ("outra coisa, quanto é...";
# "posso fazer outra coisa?" does not): checked within the first words.
_SWITCH_OPENING = 4
# Words that open a question or a clause with its own verb, after "e"/"y"/"and" or ",".
QUESTION_STARTERS = _per_language("question_starters")
# Two-word starters: "o que", "por que", "lo que", "por qué".
QUESTION_STARTER_PAIRS = frozenset(_every_languages_phrases("question_starter_pairs"))
CONJUNCTIONS = _every_language("conjunctions")


def _langs(lang: str | None) -> tuple[str, ...]:
    return (lang,) if lang in _LANGS else _LANGS


def _is_expletive(code: str, words: Sequence[str], i: int) -> bool:
    """ "is it possible", "is it worth": a pronoun that refers to nothing."""
    if words[i] not in _EXPLETIVE[code]:
        return False
    return bool(set(words[i + 1 : i + 4]) & _EXPLETIVE_NEXT[code])


def _is_pronoun_that(code: str, words: Sequence[str], i: int) -> bool:
    if words[i] not in _PRONOUN_THAT[code]:
        return False
    if i == len(words) - 1 or i == 0:
        return True
    return words[i - 1] in _THAT_PRONOUN_AFTER[code]


def _is_locative(code: str, words: Sequence[str], i: int) -> bool:
    if words[i] not in _LOCATIVE[code]:
        return False
    nxt = words[i + 1] if i + 1 < len(words) else ""
    prev = words[i - 1] if i else ""
    return nxt not in _BE[code] and prev not in _BE[code]


def _is_object_pronoun(code: str, words: Sequence[str], i: int) -> bool:
    """ "me la pueden adelantar?", "se lo descuentan?", "lo puedo pedir?", and the noun left
    out in "la de junio", "los de la cooperativa" (Spanish)."""
    if words[i] not in _OBJECT[code] or i + 1 >= len(words):
        return False
    if words[i] not in _NEUTER_OBJECT[code] and words[i + 1] in _OF[code]:
        return True
    after_dative = i > 0 and words[i - 1] in _DATIVE[code]
    return after_dative or (i == 0 and words[1] in _VERBS_AFTER[code])


def _is_same_phrase(words: Sequence[str], i: int, code: str, content: frozenset[str]) -> bool:
    """ "o mesmo vale para PJ?" points back; "recebem o mesmo salário" does not."""
    if i + 1 >= len(words) or (words[i], words[i + 1]) not in ANAPHOR_PHRASES[code]:
        return False
    return i + 2 >= len(words) or words[i + 2] not in content


def _points_back(
    code: str, words: Sequence[str], surface: str, i: int, content: frozenset[str]
) -> bool:
    """Whether word `i` refers back to something said before, read as language `code`."""
    word = words[i]
    nxt = words[i + 1] if i + 1 < len(words) else ""
    return (
        word in ANAPHORS[code]
        or surface in SURFACE_ANAPHORS[code]
        or (surface in DETERMINERS_SURFACE[code] and nxt in content - _TIME_WORDS)
        or _is_object_pronoun(code, words, i)
        or (word in _POINTING_UNLESS_TIME[code] and nxt not in _TIME_WORDS)
        or _is_pronoun_that(code, words, i)
        or _is_locative(code, words, i)
        or bool(_CLITIC_RE[code].search(word))
        or _is_same_phrase(words, i, code, content)
        or any(tuple(words[i : i + len(p)]) == p for p in _CONTINUATIONS)
        or (i == len(words) - 1 and i > 0 and word in DANGLING[code])
    )


def find_anaphors(tokens: Sequence[Token], lang: str | None, content: frozenset[str]) -> list[int]:
    """Return the positions of words that refer back to something said before."""
    words = [t.norm for t in tokens]
    found: list[int] = []
    for i, token in enumerate(tokens):
        word, surface = words[i], token.text.casefold()
        nxt = words[i + 1] if i + 1 < len(words) else ""
        prev = words[i - 1] if i else ""
        for code in _langs(lang):
            if _is_expletive(code, words, i):
                continue
            if word in ANAPHORS[code] and nxt in _TIME_WORDS:
                continue  # "desse ano", "nesta semana": this year, not "that one"
            if surface in SURFACE_ANAPHORS[code] and prev in _DOUBLED_BY[code]:
                continue
            if _points_back(code, words, surface, i, content):
                found.append(i)
                break
    return found


# Words that ask about a facet of a topic rather than name one ("qual o prazo?", "what is the
# cost?"): an elliptical follow-up that swaps the topic keeps them ("e férias?" after "prazo
# do reembolso" asks for the vacation deadline).
FACETS = _every_language("facets")


def strip_lead_filler(tokens: Sequence[Token]) -> list[Token]:
    """Drop chatter such as "ok," or "entendi," at the start of a turn."""
    rest = list(tokens)
    while len(rest) > 1 and rest[0].norm in _LEAD_FILLER:
        rest = rest[1:]
    return rest


def opener_length(tokens: Sequence[Token], lang: str | None) -> int:
    """Return how many leading words form a continuation opener ("e", "what about"), or 0."""
    rest = strip_lead_filler(tokens)
    skipped = len(tokens) - len(rest)
    words = tuple(t.norm for t in rest)
    best = 0
    for code in _langs(lang):
        for opener in OPENERS[code]:
            if words[: len(opener)] == opener and len(opener) > best:
                # Portuguese "é" (is) normalises to "e" (and): only the bare "e" opens.
                if opener[0] == "e" and rest[0].text.casefold() != "e":
                    continue
                best = len(opener)
    return skipped + best if best else 0


def is_hypothetical(tokens: Sequence[Token], opener: int) -> bool:
    """Tell whether the opener ends in "se"/"si"/"if": "e se...", "what if...", "y si..."."""
    return 0 < opener <= len(tokens) and tokens[opener - 1].norm in _HYPOTHETICAL


def is_topic_switch(tokens: Sequence[Token]) -> bool:
    """Tell whether the user says they are changing the subject."""
    words = [t.norm for t in tokens]
    present = set(words)
    if present & _SWITCH_VERBS and present & _SWITCH_NOUNS:
        return True
    # "e sobre o <benefit>?" names a new subject; "e sobre o <deadline>?" asks a facet.
    rest = strip_lead_filler(tokens)
    lead = tuple(t.norm for t in rest[:2])
    if lead in _ABOUT_OPENERS and lead[0] == rest[0].text.casefold():
        named = [t.norm for t in rest[2:] if len(t.norm) > 3 and t.norm not in _ARTICLES]
        if named and not all(w in FACETS for w in named):
            return True
    return _last_phrase_end(words[: _SWITCH_OPENING + 1], _SWITCH_PHRASES) >= 0


def _last_phrase_end(words: Sequence[str], phrases: Sequence[tuple[str, ...]]) -> int:
    """The index of the last word that ends one of `phrases` in `words`, or -1."""
    end = -1
    for phrase in phrases:
        size = len(phrase)
        for i in range(len(words) - size + 1):
            if tuple(words[i : i + size]) == phrase:
                end = max(end, i + size - 1)
    return end


_PREAMBLE_END = re.compile(r"\s*[,:;.!—–-]+\s*")
# An announcement "mudando de assunto", "cambiando de tema", "changing the subject".
_ANNOUNCEMENTS = (
    *_SWITCH_PHRASES,
    *(
        (verb, link, noun)
        for verb in _SWITCH_VERBS
        for link in ("de", "the")
        for noun in _SWITCH_NOUNS
    ),
)


def after_switch_announcement(text: str) -> str:
    """The question after a leading announcement of a new subject: "mudando de assunto,
    como funciona o banco de horas?" -> "como funciona o banco de horas?". Text with no
    such announcement, or nothing after it, comes back as it was."""
    tokens = token_spans(text)
    end = _last_phrase_end([t.norm for t in tokens[: _SWITCH_OPENING + 1]], _ANNOUNCEMENTS)
    if end < 0:
        return text
    if end + 1 < len(tokens) and tokens[end + 1].norm in _SWITCH_NOUNS:
        end += 1  # "mudando de assunto": the phrase "mudando de" names its noun after it
    mark = _PREAMBLE_END.match(text, tokens[end].end)
    rest = text[mark.end() :] if mark else ""
    return rest if len(token_spans(rest)) >= 2 else text


def starts_clause(tokens: Sequence[Token], lang: str | None) -> bool:
    """Tell whether the words open a question or clause of their own ("como pido", "what is")."""
    if not tokens:
        return False
    first = tokens[0].norm
    second = tokens[1].norm if len(tokens) > 1 else ""
    if (first, second) in QUESTION_STARTER_PAIRS:
        return True
    return any(first in QUESTION_STARTERS[code] for code in _langs(lang))


# "voltando ao primeiro assunto", "lo primero que te pregunté", "going back to the first
# question": a reference to the start of the conversation.
_START_PHRASES = _every_languages_phrases("start_phrases")


def refers_to_start(tokens: Sequence[Token]) -> bool:
    """Tell whether the turn points back at the start of the conversation."""
    words = [t.norm for t in tokens]
    return any(
        tuple(words[i : i + len(p)]) == p
        for p in _START_PHRASES
        for i in range(len(words) - len(p) + 1)
    )


# "What are <acronym> <noun>?", "what is an <noun>?", "Explain <name>.": English asks what a
# thing is by naming it; "the" ("what is the limit?") or a pronoun points back instead.
_DEFINITION_STARTS = {lang: _phrases(lang, "definition_starts") for lang in _LANGS}
_DEFINITION_OPENERS = _per_language("definition_openers")
_POINTING_WORDS = _per_language("pointing_words")


def names_what_it_defines(tokens: Sequence[Token], lang: str | None) -> bool:
    """Whether a turn asks what something is and names that thing in full: "what are VPC
    clusters?" asks about VPC clusters whatever came before; "what is the difference?" or
    "what is it?" asks about the conversation's subject. Portuguese and Spanish put an
    article before any noun, so only a language whose file lists `definition_starts`
    (English) says this by its words."""
    if lang is None or not _DEFINITION_STARTS.get(lang):
        return False
    words = [t.norm for t in tokens]
    while words and words[0] in _DEFINITION_OPENERS[lang]:
        words = words[1:]
    for start in _DEFINITION_STARTS[lang]:
        if tuple(words[: len(start)]) == start:
            subject = words[len(start) :]
            return bool(subject) and not any(w in _POINTING_WORDS[lang] for w in subject)
    return False


# A correction of the reading: "não, era o do outro plano", "no, I meant attachments", "no,
# me refería a ...". A correction phrase opens the turn, after a negation or not; a few
# shorter ones ("era", "I mean") correct only right after a negation.
_CORRECTION_NEGATIONS = _every_languages_phrases("correction_negations")
_CORRECTION_PHRASES = _every_languages_phrases("correction_phrases")
_AFTER_NEGATION = _every_languages_phrases("after_negation_phrases")
# A return to an earlier topic: "voltando ao reembolso", "going back to the laptop question".
_RETURN_PHRASES = _every_languages_phrases("return_phrases")
# "... o reembolso que eu perguntei antes", "the laptop thing I asked about earlier": a
# topic said to come from earlier in the conversation, wherever the phrase stands.
_EARLIER_PHRASES = _every_languages_phrases("earlier_phrases")


def _phrase_at(words: Sequence[str], start: int, phrases: Sequence[tuple[str, ...]]) -> int:
    """The length of the longest of `phrases` at `words[start:]`, or 0."""
    return max((len(p) for p in phrases if tuple(words[start : start + len(p)]) == p), default=0)


def _after(text: str, tokens: Sequence[Token], end: int) -> str:
    """The text after token `end - 1`, its leading punctuation dropped."""
    if end <= 0 or end > len(tokens):
        return ""
    return text[tokens[end - 1].end :].lstrip(" ,:;.!—–-")


def correction_rest(text: str) -> str | None:
    """What a correction of the reading says was meant ("attachments" in "no, I meant
    attachments"), or None when the turn corrects nothing."""
    tokens = token_spans(text)
    words = [t.norm for t in strip_lead_filler(tokens)]
    skipped = len(tokens) - len(words)
    negation = _phrase_at(words, 0, _CORRECTION_NEGATIONS)
    length = _phrase_at(words, negation, _CORRECTION_PHRASES)
    if not length and negation:
        length = _phrase_at(words, negation, _AFTER_NEGATION)
        # Portuguese "é" (is) normalises to "e" (and): "não, é o outro" corrects, "e o VA?"
        # after an apology only continues.
        if length and words[negation] == "e" and tokens[skipped + negation].text != "é":
            length = 0
    if not length:
        return None
    rest = _after(text, tokens, skipped + negation + length)
    return rest or None


def after_negation(text: str) -> str | None:
    """What follows a leading negation set off by punctuation ("o odontológico" in "não,
    o odontológico"), or None: whether it corrects depends on what it names."""
    tokens = token_spans(text)
    words = [t.norm for t in strip_lead_filler(tokens)]
    skipped = len(tokens) - len(words)
    negation = _phrase_at(words, 0, _CORRECTION_NEGATIONS)
    if not negation or skipped + negation >= len(tokens):
        return None
    last = tokens[skipped + negation - 1]
    if not _PREAMBLE_END.match(text, last.end) or not text[last.end :][:1].strip():
        return None  # "não tenho dependentes": the negation belongs to the sentence
    return _after(text, tokens, skipped + negation) or None


def return_rest(text: str) -> str | None:
    """What a return to an earlier topic names and asks ("reembolso, qual o prazo?" in
    "voltando ao reembolso, qual o prazo?"), or None when the turn opens with no return."""
    tokens = token_spans(text)
    words = [t.norm for t in strip_lead_filler(tokens)]
    skipped = len(tokens) - len(words)
    length = _phrase_at(words, 0, _RETURN_PHRASES)
    if not length:
        return None
    return _after(text, tokens, skipped + length) or None


def names_earlier_topic(text: str) -> bool:
    """Whether the turn says what it asks about was said earlier in the conversation."""
    return _last_phrase_end([t.norm for t in token_spans(text)], _EARLIER_PHRASES) >= 0
