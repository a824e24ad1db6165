"""Decide a follow-up's reading from what the searches found (pure: no I/O).

A turn with a conversation before it is searched twice in parallel, on its own and with the
conversation's topic, and the topic's words are searched alone as a probe of where the
conversation is. Words cannot tell an implicit follow-up ("se eu for desligado, perco?")
from a new question (a new benefit named, then what it is worth); the results can:

- a new topic: the turn alone finds one document confidently (top of both the vector and
  the full-text leg), the topic-aware search agrees on it, and the topic's own search does
  not reach it: the conversation adds nothing, so only the turn's own words are searched;
- a stray: the turn alone reaches none of the conversation's documents, while a short topic
  (three words at most) added to it lands confidently on one of them, blind to the turn's
  own favourite: a follow-up whose words alone wander off (topic-aware reading);
- a drift: the turn alone reaches none of the documents the conversation's topic reaches,
  yet is no clear new topic: both readings are searched, fused equally;
- otherwise a follow-up: only the topic-aware reading is kept, and the user's own words are
  not searched beside it (alone, they pulled up a sibling document: another country's or
  another audience's page).

Compared on the dev sets with three other designs (see issue 12's note): always both
readings fused, the topic-aware reading alone, and the probe-only test; this one keeps the
follow-up gains and drops the old topic after a switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .asks import CUE_WORDS
from .fusion import Hit, MergedHit
from .text import content_terms, normalize, stem, token_spans
from .tuning import tuning
from .types import SearchQuery

# A leg's rank that counts as "found it confidently".
# How deep in the topic probe's documents the turn's best document may appear and still be
# part of the conversation.
# Rare words of its own, unseen in the conversation, that make a turn name a new topic.
# A carried topic this short that lands confidently decides a drifting turn (see below).
# When undecided, the turn's own reading counts this much beside the topic-aware one.


@dataclass(frozen=True)
class ReadingDecision:
    """Which queries to search with, and why (for the trace)."""

    keep: tuple[int, ...]  # indexes into the turn's queries
    # Weight of the turn's own reading when both are searched (it is the weaker evidence).
    reading: str | None  # "standalone", "contextual", "both", or None: nothing to decide
    reason: str
    standalone_weight: float = 1.0


def _documents(hits: Sequence[Hit]) -> list[str]:
    seen: dict[str, None] = {}
    for hit in hits:
        seen.setdefault(hit.external_id, None)
    return list(seen)


def _confident(hits: Sequence[Hit]) -> bool:
    """Tell whether both legs put the best document's passages at the top.

    By document, not by passage: one section of a page may lead the vector leg and another
    the full-text leg.
    """
    if not hits:
        return False
    best = [h for h in hits if h.external_id == hits[0].external_id]
    vector = min((h.vector_rank or 999) for h in best)
    text = min((h.text_rank or 999) for h in best)
    return vector <= tuning().confident_rank and text <= tuning().confident_rank


COVER_STEM = 5  # Snowball stems cut this short: "devolver" / "devolução", "pedir" / "pedido"


def _names_something(new_terms: Sequence[str], text: str) -> bool:
    """Whether the turn's new words name a thing of their own: two or more of them, or one
    written as a name ("Basketball", "Hamnet") or a compound ("auxílio-creche"), or one
    without the English "the" that makes a lone noun point back (who "the <noun>" was, or
    what "the <noun>" are, ask of the conversation's subject; whether one needs a bare
    plural noun does not). Portuguese and Spanish put an article before any noun
    ("e o auxílio-creche?")."""
    if len(new_terms) >= 2:
        return True
    new = set(new_terms)
    tokens = token_spans(text)
    for i, token in enumerate(tokens):
        if token.norm not in new:
            continue
        if token.text[:1].isupper() or "-" in token.text:
            return True
        if not (i and tokens[i - 1].text.casefold() == "the"):
            return True
    return False


def _roots(words: Sequence[str], language: str | None) -> frozenset[str]:
    return frozenset(stem(w, language or "pt")[:COVER_STEM] for w in words if len(w) >= 3)


def _said(hits: Sequence[Hit], document: str, language: str | None) -> frozenset[str]:
    """The word roots that `document`'s found passages (and its title) have."""
    words: list[str] = []
    for hit in hits:
        if hit.external_id == document:
            words += content_terms(f"{hit.title} {hit.text}")
    return _roots(words, language)


def _titled(hits: Sequence[Hit], document: str, language: str | None) -> frozenset[str]:
    """The word roots of `document`'s title (a compound's parts as words of their own)."""
    title = next((h.title for h in hits if h.external_id == document), "")
    return _roots(content_terms(title.replace("-", " ")), language)


def choose_reading(
    queries: Sequence[SearchQuery],
    results: Sequence[Sequence[Hit]],
    topic_hits: Sequence[Hit] | None,
    new_terms: Sequence[str] = (),
    topic: str | None = None,
    language: str | None = None,
) -> ReadingDecision:
    """Keep one of a follow-up's two readings (and drop the other) from search evidence."""
    everything = tuple(range(len(queries)))
    standalone = next((i for i, q in enumerate(queries) if q.reading == "standalone"), None)
    contextual = next((i for i, q in enumerate(queries) if q.reading == "contextual"), None)
    if contextual is None:
        return ReadingDecision(everything, None, "")
    others = tuple(i for i, q in enumerate(queries) if q.reading is None and q.type != "original")
    if standalone is None:
        keep = tuple(sorted((contextual, *others)))
        return ReadingDecision(keep, "contextual", "follow-up: the turn points back at it")
    if not results[standalone]:
        keep = tuple(sorted((contextual, *others)))
        return ReadingDecision(keep, "contextual", "follow-up: the turn alone finds nothing")
    r = _Readings(
        queries,
        results,
        standalone,
        contextual,
        others,
        alone=_documents(results[standalone]),
        together=_documents(results[contextual]),
        around=_documents(topic_hits or [])[: tuning().neighbourhood],
    )
    alone, together, around = r.alone, r.together, r.around
    if new_terms and together and together[0] != alone[0]:
        decided = _by_new_words(r, new_terms, language)
        if decided is not None:
            return decided
    # The topic-aware search agreeing on the turn's own best document, or the turn naming
    # things the conversation never did, says the topic's words only add noise.
    agrees = together[:1] == alone[:1] or len(new_terms) >= tuning().new_terms
    # New words that only ask for a kind of answer ("how much", "when") name no topic: a
    # page found with them is no new subject.
    asks_only = bool(new_terms) and all(normalize(t) in CUE_WORDS for t in new_terms)
    if _confident(results[standalone]) and agrees and not asks_only and alone[0] not in around:
        why = "both readings agree on it" if together[:1] == alone[:1] else "new words"
        reason = (
            f"new topic: the turn alone finds '{alone[0]}' confidently, outside the "
            f"conversation's documents ({why}: {', '.join(new_terms) or '-'})"
        )
        return ReadingDecision(r.without_contextual, "standalone", reason)
    if around and not set(alone[: tuning().neighbourhood]) & set(around):
        return _away_from_the_conversation(r, topic)
    if around and alone[0] in around:
        reason = f"follow-up: the turn alone stays among the conversation's documents ({alone[0]})"
    elif together[:1] != alone[:1]:
        reason = "follow-up: the conversation's topic changes what the turn finds"
    else:
        reason = "follow-up: the turn alone finds nothing confidently"
    return ReadingDecision(r.contextual_only, "contextual", reason)


@dataclass(frozen=True)
class _Readings:
    """A follow-up's two readings, each query's hits, and the documents each one found."""

    queries: Sequence[SearchQuery]
    results: Sequence[Sequence[Hit]]
    standalone: int
    contextual: int
    others: tuple[int, ...]
    alone: list[str]  # the documents the turn alone finds, best first
    together: list[str]  # those the topic-aware reading finds
    around: list[str]  # the conversation's documents (the topic probe's best)

    @property
    def without_contextual(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.queries)) if i != self.contextual)

    @property
    def contextual_only(self) -> tuple[int, ...]:
        return tuple(sorted((self.contextual, *self.others)))


def _by_new_words(
    r: _Readings, new_terms: Sequence[str], language: str | None
) -> ReadingDecision | None:
    """Decide from what the two readings' best documents say of the turn's own new words
    (None: they do not tell)."""
    alone, together, results = r.alone, r.together, r.results
    wanted = _roots(new_terms, language)
    own = _said(results[r.standalone], alone[0], language) & wanted
    topical = _said(results[r.contextual], together[0], language) & wanted
    # The conversation's page says some of the new words in passing, while the turn's own
    # page is titled by all of them and the topic-aware reading ranks it near its top too
    # (a new kind of leave asked after an allowance whose page mentions another leave).
    titled = _titled(results[r.standalone], alone[0], language)
    partly = (
        topical < wanted and wanted <= titled and alone[0] in together[: tuning().confident_rank]
    )
    if (
        own == wanted
        and (not topical or partly)
        and _names_something(new_terms, r.queries[r.standalone].text)
        and _confident(results[r.standalone])
        and alone[0] not in r.around
    ):
        # A new benefit named after another subject: the topic-aware reading lands on the
        # old page, which never says the turn's words; the turn's own does.
        reason = (
            f"new topic: '{alone[0]}' says the turn's own words "
            f"({', '.join(new_terms)}), the conversation's page '{together[0]}' none"
        )
        return ReadingDecision(r.without_contextual, "standalone", reason)
    if topical > own and _confident(results[r.contextual]):
        # A condition asked of the topic (repaying an allowance on leaving): the topic-aware
        # reading's page says more of the turn's own words than the page the words alone
        # find (the resignation page).
        reason = (
            f"follow-up: the topic-aware reading's '{together[0]}' says more of the "
            f"turn's own words ({', '.join(new_terms)}) than '{alone[0]}'"
        )
        return ReadingDecision(r.contextual_only, "contextual", reason)
    return None


def _away_from_the_conversation(r: _Readings, topic: str | None) -> ReadingDecision:
    """The turn alone reaches none of the conversation's documents: a follow-up whose words
    wander off, or a drift; search both where it cannot tell."""
    if (
        0 < len(content_terms(topic or "")) <= tuning().focused_topic_terms
        and _confident(r.results[r.contextual])
        and r.together[0] in r.around
        and r.alone[0] not in r.together[: tuning().confident_rank]
    ):
        # A topic of a few words that, added to the turn, lands firmly on a document of the
        # conversation, blind to the turn's own favourite: a follow-up whose words alone
        # wander off. A long topic lands on its own documents whatever the turn asks, so it
        # proves nothing (MTRAG's drifts from one work to another of the same author).
        reason = (
            f"follow-up: the topic-aware reading finds '{r.together[0]}' confidently, "
            "among the conversation's documents, and the turn alone strays"
        )
        return ReadingDecision(r.contextual_only, "contextual", reason)
    # Not standing out as a new topic either: a drift as often as a follow-up. Both readings
    # are searched, fused equally (the user's words are the plain reading already).
    keep = tuple(sorted((r.contextual, r.standalone, *r.others)))
    reason = "undecided: the turn alone finds none of the conversation's documents"
    return ReadingDecision(keep, "both", reason, tuning().both_standalone_weight)


# The conversation's last reply was written from its documents (in the chat, quoted from
# them): in a follow-up they win close calls. Its words are searched on the full-text leg
# alone, like the topic probe, and its best documents gain this share of the best fused
# score; enough to break a near tie, never to outvote what the turn's own search found.
# Measured (rules, MRR@10): ptes-dev .801 -> .834, the demo unchanged; 0.1 lost on the
# demo's sibling follow-ups and on MTRAG clapnq, whose documents are single passages.


def reply_probe(window_texts: Sequence[tuple[str, str]]) -> str | None:
    """The words of the conversation's last reply, to search where it came from.

    `window_texts` are the window's (role, text) pairs, oldest first."""
    for role, text in reversed(window_texts):
        if role == "assistant":
            words = list(dict.fromkeys(content_terms(text)))
            return " ".join(words) or None
    return None


def favour_reply_documents(
    merged: Sequence[MergedHit],
    reply_hits: Sequence[Hit],
    asked: Sequence[str],
) -> tuple[list[MergedHit], list[str]]:
    """Lift the last reply's documents a little; return the new order and those lifted.

    A document is not lifted past one whose title names a word of the question that its
    own title lacks ("e para quem é PJ?" after the employees' health-plan answer: the PJ
    page's title says "PJ", so the previous answer's page may not pass it), nor past
    another passage of a page of the same title: where documents are single passages of
    one article (MTRAG), a follow-up asks what the reply's passage did not say."""
    reply = _documents(reply_hits)[: tuning().reply_documents]
    if not merged or not reply:
        return list(merged), []
    rank = {d: i for i, d in enumerate(reply)}
    # Two letters count here: an acronym ("PJ", "IR") names a page as well as a word does.
    wanted = word_stems(asked, shortest=2)
    named: dict[str, frozenset[str]] = {}
    titles: dict[str, str] = {}
    for item in merged:
        document = item.hit.external_id
        if document not in titles:
            titles[document] = normalize(item.hit.title)
            named[document] = wanted & word_stems(content_terms(item.hit.title), shortest=2)
    above: list[str] = []
    blocked: set[str] = set()
    for item in merged:
        document = item.hit.external_id
        if document in rank and document not in above:
            if any(named[other] - named[document] for other in above) or any(
                titles[other] == titles[document] for other in above
            ):
                blocked.add(document)
        if document not in above:
            above.append(document)
    best = merged[0].score
    out = [
        replace(
            item, score=item.score + tuning().reply_boost * best / (1 + rank[item.hit.external_id])
        )
        if item.hit.external_id in rank and item.hit.external_id not in blocked
        else item
        for item in merged
    ]
    out.sort(key=lambda m: (-m.score, m.hit.chunk_id))
    before = _documents([m.hit for m in merged])
    after = _documents([m.hit for m in out])
    lifted = [d for d in after if d in rank and after.index(d) < before.index(d)]
    return out, lifted


_STEM = 6  # title and question words compared by their first letters ("licença"/"licencia")


def word_stems(words: Sequence[str], shortest: int = 3) -> frozenset[str]:
    return frozenset(w[:_STEM] for w in words if len(w) >= shortest)


# A title that names its page as the general rule of its subject.
