"""Decide whether a turn leans on the conversation, and which earlier words to carry over.

The approach is HQE's (Lin et al. 2020) with corpus IDF as the predictor:
- a turn depends on the conversation when it points back (a pronoun, "o mesmo"), opens
  with a continuation ("e para PJ?", "what about...", "y si..."), or is short and made of
  common words only ("qual o prazo?");
- it then takes the rarer words of the most recent self-contained user turn, plus a few
  rare words of the dependent user turns after it, never from assistant replies (long,
  and they drag noise in);
- a new value of a slot (PJ for CLT, Chile for España) replaces the old one;
- a turn with words of its own and no such cue is left alone, which is also what keeps a
  topic switch from dragging the old topic in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from retrieval.pipeline.rewrite_rules.cues import (
    FACETS,
    find_anaphors,
    is_hypothetical,
    is_topic_switch,
    opener_length,
    starts_clause,
    strip_lead_filler,
)
from retrieval.pipeline.rewrite_rules.lexicon import Stats
from retrieval.pipeline.rewrite_rules.slots import narrows_place, slot_spans
from retrieval.pipeline.text import Token, is_content_word, token_spans
from retrieval.pipeline.tuning import tuning

Kind = Literal["self", "anaphor", "ellipsis", "weak", "switch"]
Mentions = Mapping[str, int]
DEPENDENT_KINDS: frozenset[Kind] = frozenset({"anaphor", "ellipsis", "weak"})
# An infinitive, with or without a pronoun ("partir", "usarla"): what a follow-up does
# with the topic, not the topic.
_INFINITIVE_RE = re.compile(r"^\w{2,}(?:ar|er|ir)(?:l[ao]s?|se|me|te|nos|lhe)?$")
# A turn of common words only leans on the conversation when it is this short; a longer
# one (whether one product is included in another's price) says what it asks about...
# ...and a short turn's word must be rarer than usual to name a topic by itself: in a
# policy corpus "prazo" or "limite" are rare yet only ask about a facet of the topic
# ("e qual o prazo?"). 0.6-0.8 gave the same results on MTRAG; 0.45 was worse.
# Function words kept between two carried words so phrases stay readable
# ("reembolso de despesas", "cost of living").
_BRIDGES = frozenset("de do da dos das del of the o a os as el la los las e y and".split())
# Words between a preposition and its value in "e para quem é PJ?", "y para los que son
# pasantes?", "and for those who are contractors?".
_FRAME_RELATIVES = frozenset("quem que who those is are sao es son seja sea".split())
_RELATIVE_PRONOUNS = frozenset("quem que who".split())
# Personal pronouns, which may name a person of the same turn ("o Rafael ... ele").
# Spanish "le"/"les" too: "a mi compañera Lucía, le robaron la laptop" names her first.
_PERSONAL = frozenset(
    "ele ela eles elas dele dela deles delas nele nela neles nelas el ella ellos ellas "
    "le les".split()
)

_CLAUSE_JOINERS = frozenset({"e", "y", "and", "but", "mas", "pero"})
# Prepositions that frame the value an elliptical follow-up replaces ("e para X?").
_PREPOSITIONS: dict[str, dict[str, str]] = {
    "pt": {
        "para": "for",
        "pra": "for",
        "pro": "for",
        "em": "in",
        "no": "in",
        "na": "in",
        "nos": "in",
        "nas": "in",
        "com": "with",
        "sem": "without",
    },
    "es": {"para": "for", "en": "in", "con": "with", "sin": "without"},
    "en": {"for": "for", "in": "in", "at": "in", "with": "with", "without": "without"},
}


@dataclass(frozen=True)
class Turn:
    """A text with its tokens and content words (normalised, in order)."""

    text: str
    tokens: tuple[Token, ...]
    terms: tuple[str, ...]


@lru_cache(maxsize=256)
def make_turn(text: str, stopwords: frozenset[str]) -> Turn:
    """Tokenise a text once for every later step.

    Cached (a Turn is immutable): one rewrite reads the question and each message several
    times, and the next turn reads the same history again. 256 texts: a long reply's tokens
    take ~50 KiB.
    """
    tokens = tuple(token_spans(text))
    terms = tuple(t.norm for t in tokens if is_content_word(t.norm, stopwords))
    return Turn(text, tokens, terms)


@dataclass(frozen=True)
class Dependency:
    """How a turn relates to the conversation, and the word that showed it."""

    kind: Kind
    cue: str = ""
    opener: int = 0  # leading words that only continue the previous question
    position: int = -1  # index of the pronoun, for an anaphor

    @property
    def dependent(self) -> bool:
        """Tell whether the turn needs words from the conversation."""
        return self.kind in DEPENDENT_KINDS


def _resolved_inside(turn: Turn, anaphor: int, opener: int) -> bool:
    """Tell whether an earlier clause of the turn names what the pronoun points at.

    "Speaking of vaccines, how are they made?" resolves its own pronoun; "Any cures for
    it?" does not, though "cures" comes before "it".
    """
    tokens = turn.tokens
    boundary = 0
    for i in range(max(opener, 1), anaphor + 1):
        between = turn.text[tokens[i - 1].end : tokens[i].start]
        if any(c in between for c in ",;:.?!") or tokens[i].text.casefold() in _CLAUSE_JOINERS:
            boundary = i
    content = set(turn.terms)
    return any(t.norm in content for t in tokens[opener:boundary])


def _names_new_topic(turn: Turn, protected: frozenset[str], mentions: Mentions | None) -> bool:
    """Tell whether the turn names something no other message of the conversation does.

    A name is a glossary term or a capitalised word: "quando cai o 13º?" after talk of
    vacation is a new topic; "who is Patel?" after an answer about Patel is not.
    """
    content = set(turn.terms)
    for i, token in enumerate(turn.tokens):
        capitalised = token.text[:1].isupper() and (i > 0 or token.text.isupper())
        named = token.norm in protected or (capitalised and len(token.text) > 1)
        if not named or token.norm not in content:
            continue
        if mentions is None or mentions.get(token.norm, 0) <= 1:
            return True
    return False


def _short_kind(
    turn: Turn,
    lang: str | None,
    stats: Stats,
    protected: frozenset[str],
    mentions: Mentions | None,
) -> str:
    """Say why a turn of one or two content words leans on the conversation, or ""."""
    if _names_new_topic(turn, protected, mentions):
        return ""
    if not any(stats.weight(w) >= tuning().short_strong for w in turn.terms):
        return "only common words"
    # "quanto tempo leva?", "posso parcelar?", "tem limite?": rare words, but a question
    # about the topic at hand rather than a new one.
    if starts_clause(strip_lead_filler(turn.tokens)[:2], lang):
        return "short question"
    return ""


def assess(
    turn: Turn,
    lang: str | None,
    stats: Stats,
    protected: frozenset[str] = frozenset(),
    mentions: Mentions | None = None,
) -> Dependency:
    """Classify a turn as self-contained, a topic switch, or dependent (and why).

    `mentions` counts the conversation's messages (the turn's own included) that contain
    each word; without it a short turn that names something is taken as self-contained.
    """
    if is_topic_switch(turn.tokens):
        return Dependency("switch", "explicit change of subject")
    content = frozenset(turn.terms)
    strong = {w for w in turn.terms if stats.is_strong(w)}
    opener = opener_length(turn.tokens, lang)
    anaphors = find_anaphors(turn.tokens, lang, content)
    # A pronoun may point at an earlier clause of the same turn ("Speaking of vaccines,
    # how are they made?", "o Rafael pediu demissão e ele tinha auxílio"), but a
    # Portuguese or Spanish demonstrative points at the conversation even after a clause
    # of its own (a personal event told, then whether more than that can be had).
    inside = False
    if anaphors:
        demonstrative = lang in ("pt", "es") and turn.tokens[anaphors[0]].norm not in _PERSONAL
        inside = not demonstrative and _resolved_inside(turn, anaphors[0], opener)
    if anaphors and not inside:
        return Dependency("anaphor", turn.tokens[anaphors[0]].text, opener, anaphors[0])
    # "e para PJ?" is elliptical; "and what is the per diem?" asks a question of its own;
    # "e se eu estiver de férias?" continues the previous question unless it is long.
    hypothetical = is_hypothetical(turn.tokens, opener)
    elliptical = opener and (
        hypothetical or not starts_clause(turn.tokens[opener : opener + 2], lang)
    )
    sufficient = len(content) >= 5 if hypothetical else len(strong) >= 2 and len(content) >= 3
    if elliptical and not sufficient:
        return Dependency("ellipsis", " ".join(t.text for t in turn.tokens[:opener]), opener)
    if not content:
        return Dependency("weak", "no content words")
    short = ""
    if len(content) <= tuning().weak_max_terms:
        short = _short_kind(turn, lang, stats, protected, mentions)
    return Dependency("weak", short) if short else Dependency("self")


@dataclass
class Carried:
    """Words carried from one earlier user turn, rendered as a phrase of that turn."""

    offset: int  # -1 is the most recent user turn
    terms: tuple[str, ...]
    phrase: str


@dataclass
class CarryPlan:
    """What a dependent turn takes from the conversation."""

    carried: list[Carried] = field(default_factory=list)
    replaced: list[tuple[str, str]] = field(default_factory=list)  # (old words, new words)

    @property
    def phrase(self) -> str:
        """Return the carried phrases, oldest first."""
        return " ".join(c.phrase for c in sorted(self.carried, key=lambda c: c.offset))


def render_phrase(tokens: Sequence[Token], chosen: set[str]) -> str:
    """Return the chosen words in their original order and spelling, once each.

    Up to two function words between two chosen words are kept ("reembolso de despesas").
    """
    seen: set[str] = set()
    keep: list[int] = []
    for i, token in enumerate(tokens):
        if token.norm in chosen and token.norm not in seen:
            seen.add(token.norm)
            keep.append(i)
    out: list[str] = []
    for position, index in enumerate(keep):
        if position:
            gap = tokens[keep[position - 1] + 1 : index]
            if 0 < len(gap) <= 2 and all(t.norm in _BRIDGES for t in gap):
                out.extend(t.text for t in gap)
        out.append(tokens[index].text)
    return " ".join(out)


def _slot_values(turn: Turn, extra: Mapping[tuple[str, ...], str]) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {}
    for first, last, slot in slot_spans(turn.tokens, extra):
        values.setdefault(slot, set()).update(t.norm for t in turn.tokens[first : last + 1])
    return values


def _frame(
    tokens: Sequence[Token], start: int, lang: str | None, stopwords: frozenset[str]
) -> tuple[str, list[str]] | None:
    """Return (preposition class, content words) of a prepositional phrase at `start`."""
    preps = _PREPOSITIONS.get(lang or "", {})
    if start >= len(tokens) or tokens[start].norm not in preps:
        return None
    words: list[str] = []
    following = tokens[start + 1 : start + 5]
    for index, token in enumerate(following):
        if is_content_word(token.norm, stopwords):
            # "pra quem adota": a verb after the relative asks about someone new, not a
            # value of the topic ("para quem é PJ").
            if index and following[index - 1].norm in _RELATIVE_PRONOUNS:
                return None
            words.append(token.norm)
        elif (token.norm not in _BRIDGES and token.norm not in _FRAME_RELATIVES) or words:
            break
    return (preps[tokens[start].norm], words) if words else None


def frame_at(
    tokens: Sequence[Token], start: int, lang: str | None, stopwords: frozenset[str]
) -> tuple[str, list[str]] | None:
    """The prepositional phrase at `start` ("para PJ", "for contractors"): see `_frame`."""
    return _frame(tokens, start, lang, stopwords)


def _frame_words(turn: Turn, frame_class: str, lang: str | None, sw: frozenset[str]) -> set[str]:
    found: set[str] = set()
    for i in range(len(turn.tokens)):
        frame = _frame(turn.tokens, i, lang, sw)
        if frame and frame[0] == frame_class:
            found.update(frame[1])
    return found


@dataclass
class _Walk:
    """State of the walk back through user turns."""

    blocked: set[str]
    slots: dict[str, set[str]]
    frame: tuple[str, list[str]] | None
    surface: dict[str, str]  # how the newer words were written, for notes
    extra_slots: Mapping[tuple[str, ...], str]
    plan: CarryPlan = field(default_factory=CarryPlan)


def _replacements(
    turn: Turn, walk: _Walk, lang: str | None, sw: frozenset[str]
) -> list[tuple[set[str], set[str]]]:
    """Return (old words of `turn`, newer words) for each value replaced by a newer one."""
    found: list[tuple[set[str], set[str]]] = []
    for slot, words in _slot_values(turn, walk.extra_slots).items():
        newer = walk.slots.get(slot, set())
        if slot == "place" and narrows_place(words, newer):
            continue
        if newer and not words & newer and words - walk.blocked:
            found.append((words - walk.blocked, newer))
    # An unclassified value after the same preposition also replaces ("e para cursos?").
    if walk.frame and not slot_spans(make_turn(" ".join(walk.frame[1]), sw).tokens):
        old = _frame_words(turn, walk.frame[0], lang, sw) - walk.blocked
        if old and not slot_spans(make_turn(" ".join(old), sw).tokens):
            found.append((old, set(walk.frame[1])))
    return found


def _carried_words(anchors: int, is_anchor: bool, kind: Kind) -> tuple[float, int]:
    """How rare an earlier turn's words must be to be carried, and how many at most.

    The turn that names the topic gives its rarer words; a turn that points back gives only
    its rare ones; a vague one (asking only a facet: the deadline) its less common ones.
    """
    if anchors:
        # The turn before the newest self-contained one: that one may have been an implicit
        # follow-up itself (whether a balance is lost, after the hours bank), so the older
        # topic lends its rarest word.
        return tuning().strong, tuning().earlier_anchor_terms
    if is_anchor:
        return tuning().common, tuning().anchor_terms
    return (tuning().common if kind == "weak" else tuning().strong), tuning().subtopic_terms


def plan_carry(
    question: Turn,
    dependency: Dependency,
    user_turns: Sequence[Turn],
    lang: str | None,
    stats: Stats,
    stopwords: frozenset[str],
    protected: frozenset[str] = frozenset(),
    glossary_slots: Mapping[tuple[str, ...], str] | None = None,
    mentions: Mentions | None = None,
) -> CarryPlan:
    """Choose the earlier user words a dependent turn needs, newest turn first.

    `protected` words (the glossary's) always count as rare; `glossary_slots` makes terms
    of one glossary area alternatives to each other ("e o VA?" replaces "VR").
    """
    extra = glossary_slots or {}
    frame = None
    if dependency.kind == "ellipsis":
        frame = _frame(question.tokens, dependency.opener, lang, stopwords)
    surface = {t.norm: t.text for t in question.tokens}
    # A new value replaces an old one when the turn is about that value ("e para PJ?",
    # "isso vale para PJ?"), not when it is part of a longer question ("e quanto é o
    # auxílio home office nesse caso?" keeps "regime híbrido").
    replacing = dependency.kind == "ellipsis" or len(set(question.terms)) <= 2
    slots = _slot_values(question, extra) if replacing else {}
    walk = _Walk(set(question.terms), slots, frame, surface, extra)

    def weight(word: str) -> float:
        return max(stats.weight(word), tuning().strong if word in protected else 0.0)

    positions = {t.norm: i for i, t in reversed(list(enumerate(question.tokens)))}

    def order(word: str) -> tuple[int, str]:
        return positions.get(word, len(positions)), word

    anchors = 0
    for offset in range(-1, -len(user_turns) - 1, -1):
        turn = user_turns[offset]
        kind = assess(turn, lang, stats, protected, mentions).kind
        is_anchor = kind not in DEPENDENT_KINDS
        if anchors and kind == "switch":
            break
        replaced: set[str] = set()
        for old, newer in _replacements(turn, walk, lang, stopwords):
            replaced |= old
            new_words = " ".join(walk.surface.get(w, w) for w in sorted(newer, key=order))
            walk.plan.replaced.append((render_phrase(turn.tokens, old), new_words))
        floor, limit = _carried_words(anchors, is_anchor, kind)
        candidates = [
            w
            for w in dict.fromkeys(turn.terms)
            if w not in walk.blocked
            and w not in replaced
            and weight(w) >= floor
            and (is_anchor or not _INFINITIVE_RE.match(w) or lang not in ("pt", "es"))
        ]
        # Rarest first; without corpus statistics, longest first.
        candidates.sort(key=lambda w: (weight(w), len(w)), reverse=True)
        chosen = candidates[:limit]
        if chosen:
            phrase = render_phrase(turn.tokens, set(chosen))
            walk.plan.carried.append(Carried(offset, tuple(chosen), phrase))
            walk.blocked.update(chosen)
            for slot, words in _slot_values(turn, walk.extra_slots).items():
                walk.slots.setdefault(slot, set()).update(words & set(chosen))
            walk.surface.update((t.norm, t.text) for t in turn.tokens if t.norm in chosen)
        if anchors or (is_anchor and kind == "switch"):
            break
        anchors += is_anchor
    return walk.plan


def topic_swap(
    question: Turn,
    dependency: Dependency,
    plan: CarryPlan,
    user_turns: Sequence[Turn],
    lang: str | None,
    stopwords: frozenset[str],
) -> str | None:
    """The other reading of a bare "e férias?": the facet asked before, about a new topic.

    Only for an ellipsis with a noun phrase of its own: not a prepositional restriction
    ("e para PJ?"), not a slot value ("e dependentes?", "y en Chile?") and not a facet
    ("e o prazo?"), all of which keep the topic; and only when nothing was replaced.
    """
    if dependency.kind != "ellipsis" or plan.replaced or not plan.carried:
        return None
    if is_hypothetical(question.tokens, dependency.opener):  # "e se eu estiver de férias?"
        return None
    if _frame(question.tokens, dependency.opener, lang, stopwords) is not None:
        return None
    rest = question.tokens[dependency.opener :]
    words = [t.norm for t in rest if is_content_word(t.norm, stopwords)]
    # A bare noun phrase is short; a longer rest asks something of its own.
    if not 0 < len(words) <= 3 or any(w in FACETS for w in words) or slot_spans(rest):
        return None
    anchor = user_turns[min(c.offset for c in plan.carried)]
    facets = {w for w in anchor.terms if w in FACETS}
    phrase = render_phrase(rest, set(words))
    if not facets:
        return phrase
    return f"{render_phrase(anchor.tokens, facets)} {phrase}"


def points_back(turn: Turn, dependency: Dependency, lang: str | None, sw: frozenset[str]) -> bool:
    """Tell whether the words alone settle that the turn continues the conversation.

    A pronoun ("isso vale para PJ?"), a hypothetical ("e se eu sair antes?") or a
    restriction ("e para PJ?", "y en Chile?") cannot start a new topic; a bare noun phrase
    (a new benefit named, then its value) can, and is left to the search evidence.
    """
    if dependency.kind == "anaphor":
        return True
    if dependency.kind != "ellipsis":
        return False
    if is_hypothetical(turn.tokens, dependency.opener):
        return True
    return _frame(turn.tokens, dependency.opener, lang, sw) is not None
