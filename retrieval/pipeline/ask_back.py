"""Ask back, naming the pages, where the search evidence shows a turn's readings split.

The rewriter asks back on the words alone (a pointer with nothing before it, the start of the
conversation out of sight: `rewrite_rules.core`); this module decides, once the searches
ran, whether the pages found make the turn ambiguous. `evidence_ask_back` is the only
caller-facing function: it returns what to ask, or None, and changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .ask_phrases import clarification_question
from .asks import CUE_WORDS, names_no_topic
from .evidence import word_stems
from .fusion import Hit, MergedHit
from .rewrite_rules.cues import opener_length
from .text import content_terms, detect_language, normalize, stem, title_subject, token_spans
from .tuning import tuning
from .types import Clarification, HistoryMessage, RewriteResult, SearchQuery


@dataclass(frozen=True)
class AskBack:
    """A question back: the clarification, why (`clarify_reason`), and the trace's note."""

    clarification: Clarification
    reason: str
    note: str | None = None


def evidence_ask_back(
    rewrite: RewriteResult,
    queries: Sequence[SearchQuery],
    merged: Sequence[MergedHit],
    reply_hits: Sequence[Hit],
    window: Sequence[HistoryMessage],
    question: str,
    language: str | None,
) -> AskBack | None:
    """What to ask back given what the searches found, or None (the rewrite's own ask kept).

    First a follow-up that only asks how much or when after a reply that named two or more
    pages; then a short question whose readings split across sibling pages; a pointer the
    words already asked about gets the best pages' titles as its options.
    """
    if any(rule.id == "chosen_option" for rule in rewrite.fired):
        return None  # the person just chose which page they meant
    asked = _after_a_reply_naming_pages(
        rewrite, queries, merged, reply_hits, window, question, language
    )
    asked = asked or _siblings_the_conversation_named(
        rewrite, queries, merged, window, question, language
    )
    return asked or _from_the_pages_found(rewrite, merged, language)


def _ask_which(options: Sequence[str], language: str | None, why: str) -> AskBack:
    """Ask back which of the sibling pages `options` is meant, and say why in the trace."""
    return AskBack(
        Clarification(clarification_question(options, language), tuple(options)),
        "siblings",
        f"evidence: {why} " + "; ".join(options),
    )


def _after_a_reply_naming_pages(
    rewrite: RewriteResult,
    queries: Sequence[SearchQuery],
    merged: Sequence[MergedHit],
    reply_hits: Sequence[Hit],
    window: Sequence[HistoryMessage],
    question: str,
    language: str | None,
) -> AskBack | None:
    """Ask which one, naming them, when a follow-up that only asks how much or when comes
    after a reply that named two or more pages (evidence.reply_named_documents): pages the
    turn found, or that the reply's own words find (the reply probe)."""
    if rewrite.needs_clarification or not any(q.reading == "contextual" for q in queries):
        return None
    reply = next((m.text for m in reversed(window) if m.role == "assistant"), None)
    found = [item.hit.title for item in merged[: tuning().reply_option_pages]]
    found += [hit.title for hit in reply_hits[: tuning().reply_option_pages]]
    titles = list(dict.fromkeys(t.strip() for t in found if t.strip()))
    options = reply_named_documents(question, reply, titles, rewrite.topic, language)
    if not options:
        return None
    return _ask_which(
        options, language, "the turn only asks how much or when, and the last reply named"
    )


def _siblings_the_conversation_named(
    rewrite: RewriteResult,
    queries: Sequence[SearchQuery],
    merged: Sequence[MergedHit],
    window: Sequence[HistoryMessage],
    question: str,
    language: str | None,
) -> AskBack | None:
    """Ask which one when a follow-up fits two or more sibling pages that the person named
    earlier in the conversation, and its own words tell none of them apart: the price of "the
    plan" for a dependant after asking about the medical plan and the dental one.

    Siblings share their title's head word and differ by a qualifier ("Assistência médica",
    "Assistência odontológica"); each qualifier was said by a user turn of the window (a
    reply's passing mention of another page is no reading the person had in mind); the best
    page found is one of them (a new topic's page is not); the turn names its own subject
    rather than pointing back; and it names no qualifier.
    """
    if rewrite.needs_clarification or not any(q.reading == "contextual" for q in queries):
        return None
    lang = language or "pt"

    def stems(texts: Sequence[str]) -> frozenset[str]:
        return frozenset(
            stem(t.norm, lang) for text in texts for t in token_spans(text.replace("-", " "))
        )

    users = stems([m.text for m in window if m.role == "user"])
    said = users | stems([m.text for m in window])
    found = [item.hit for item in merged[: tuning().reply_option_pages] if item.hit.title.strip()]
    named: dict[frozenset[str], tuple[str, list[str]]] = {}
    for hit in found:
        head = _headword_stems(hit.title, lang)
        if len(head) > 1 and head <= said:
            named.setdefault(head, (hit.title.strip(), content_terms(hit.text)))
    heads = list(named)
    if len(heads) < 2 or not found or _headword_stems(found[0].title, lang) not in named:
        return None
    common = frozenset.intersection(*heads)
    qualifiers = [head - common for head in heads]
    asked = stems([question])
    if not common or not all(q and q <= users for q in qualifiers):
        return None
    if any(q & asked for q in qualifiers):
        return None  # the turn names the one it means
    # A turn that points back ("e esse, quanto é?", "e se for fora do país?") follows the
    # last thing said; one that names its own subject may mean either sibling: the rewriter
    # offered it on its own, or it names the siblings' shared head word ("the plan") and
    # opens with no continuation ("and", "e se").
    own_reading = any(q.reading == "standalone" for q in rewrite.queries)
    opens = opener_length(token_spans(question), language)
    if not own_reading and (not common & asked or opens):
        return None
    # As on a first turn (ambiguous_documents): a word of the turn that one sibling's title
    # or best passage says and another's does not ("depois de me aposentar": "manutenção
    # após desligamento ou aposentadoria") tells them apart; then the search's order stands.
    terms = content_terms(question, language)
    titles = word_stems([w for title, _ in named.values() for w in content_terms(title)])
    beyond = word_stems(_naming_words(terms, language)) - titles
    own = {
        beyond & word_stems(text) | word_stems(terms) & word_stems(content_terms(title))
        for title, text in named.values()
    }
    if len(own) > 1:
        return None
    options = [title for title, _ in named.values()][: tuning().max_options]
    return _ask_which(options, language, "the turn fits each sibling the conversation named:")


def _from_the_pages_found(
    rewrite: RewriteResult, merged: Sequence[MergedHit], language: str | None
) -> AskBack | None:
    """Ask back, naming the sibling documents, when a short question's readings split.

    A clarification the words already asked for ("e isso?" with nothing before it) gets
    the best documents' titles as its options too.
    """
    pointer = rewrite.needs_clarification and rewrite.clarify_reason == "pointer"
    if not rewrite.clarify_terms and not pointer:
        return None  # nothing to decide: the hits' words are not read on an ordinary turn
    titles, texts, languages = _best_titles(merged)
    if rewrite.needs_clarification and rewrite.clarification is not None:
        if pointer and not rewrite.clarification.options and titles:
            options = [t for t, _ in titles[: tuning().pointer_options]]
            question = clarification_question(options, language)
            return AskBack(Clarification(question, tuple(options)), "pointer")
        return None
    options = ambiguous_documents(rewrite.clarify_terms, titles, texts, language)
    # A sibling in the question's own language is the reading meant: a lost meal card asked
    # in Spanish is the Uruguayan page's question, not the Brazilian one's.
    offered = [(t, lang) for (t, _), lang in zip(titles, languages, strict=True) if t in options]
    same = [t for t, lang in offered if lang == language]
    if language and options and len(same) < len(offered):
        options = same if len(same) >= 2 else []
    if not options:
        return None
    return _ask_which(options, language, "the question's readings split across")


def _best_titles(
    merged: Sequence[MergedHit],
) -> tuple[list[tuple[str, list[str]]], list[list[str]], list[str | None]]:
    """The best distinct pages' titles (with their words), texts' words and languages."""
    titles: list[tuple[str, list[str]]] = []
    texts: list[list[str]] = []
    languages: list[str | None] = []
    for item in merged:
        title = item.hit.title.strip()
        if title and title not in (t for t, _ in titles):
            words = [part for term in content_terms(title) for part in term.split("-")]
            titles.append((title, words))
            texts.append(content_terms(item.hit.text))
            languages.append(detect_language(f"{title} {item.hit.text[:300]}"))
        if len(titles) >= tuning().titles_read:
            break
    return titles, texts, languages


# --- which pages a turn may mean: the search evidence's ask-back decisions -------------------

_INFINITIVE = ("ar", "er", "ir")
_GENERAL_TITLE = re.compile(
    r"\b(?:regras? gera(?:l|is)|reglas? generales?|regimen general|visao geral|"
    r"general rules?|overview)\b"
)


def ambiguous_documents(
    question_terms: Sequence[str],
    titles: Sequence[tuple[str, Sequence[str]]],
    texts: Sequence[Sequence[str]] | None = None,
    language: str | None = None,
) -> list[str]:
    """Return the titles a short question cannot choose between, or [] when it can.

    `titles` are the best documents' (title, title words), best first. The readings split
    across sibling documents when none of the question's words tells the best documents'
    titles apart: a short question of how long a leave lasts matches "licença" in both the
    maternity and the paternity page; "licença paternidade, quantos dias?" matches one.
    `texts` (each document's best passage, as words) settle it too: a question word beyond
    the titles' that only the best page's passage has ("where does it snow the most in
    North Carolina?": the climate page) names the reading.
    """
    if not question_terms or len(titles) < 2:
        return []
    if _GENERAL_TITLE.search(normalize(titles[0][0])):
        # The best page says it is the general rule ("Férias – regras gerais para
        # empregados"): a short question that names no sibling's case is about it, not about
        # "Férias coletivas de fim de ano".
        return []
    asked = word_stems(question_terms)
    matched = [asked & word_stems(words) for _, words in titles[: tuning().clarify_depth]]
    if any(m - matched[0] for m in matched[1:]):
        return []  # a word of the question names one of the others more than the best one
    # The best page whose title opens with the asked word ("Férias – regras gerais") is the
    # general page on it: a page that only mentions the word later ("Pedido de demissão
    # durante as férias") is no competing reading of it.
    heads = [next(iter(word_stems(words[:1])), "") for _, words in titles[: tuning().clarify_depth]]
    general = heads[0] in matched[0]
    # Readings are siblings only when their titles share a word ("Assistência médica — …",
    # "Assistência odontológica — …"): unrelated pages the words fail to tell apart mean a
    # weak search, not an ambiguous question.
    first = word_stems(titles[0][1])
    same = [
        i
        for i, m in enumerate(matched)
        if m == matched[0]
        and (not general or heads[i] == heads[0])
        and (i == 0 or bool(first & word_stems(titles[i][1])))
    ]
    if texts is not None:
        # A Portuguese or Spanish infinitive ("quero entrar no plano") says what to do, not
        # which page, and a word that asks for a kind of answer ("qual o prazo pra pedir o
        # reembolso?") says what to find on it: only nouns and names beyond the titles
        # pick a reading.
        # Judged on the whole word: a stem ("cancel" of "cancelar") hides the ending.
        beyond = word_stems(_naming_words(question_terms, language)) - matched[0]
        own = [beyond & word_stems(words) for words in texts[: tuning().clarify_depth]]
        same = [i for i in same if not own[0] - own[i]]
    distinct = list(dict.fromkeys(titles[i][0] for i in same))
    return distinct[: tuning().max_options] if len(distinct) >= 2 else []


def _naming_words(terms: Sequence[str], language: str | None) -> list[str]:
    """The words of a question that may name a reading: no Portuguese or Spanish infinitive
    (what to do, not which page) and no word that asks for a kind of answer."""
    return [
        w
        for w in terms
        if not (language in ("pt", "es") and len(w) > 4 and w.endswith(_INFINITIVE))
        and normalize(w) not in CUE_WORDS
    ]


_HEAD_END = frozenset({"e", "y", "and"})


def _headword_stems(title: str, language: str) -> frozenset[str]:
    """The stems of a title's subject: its first content words before the dash, the
    parenthesis or an "e"/"y"/"and" ("Licencia anual y salario vacacional" -> licencia
    anual; "Viáticos para viajes de trabajo" -> viáticos, viajes; a compound counts its
    parts)."""
    words: list[str] = []
    for token in token_spans(title_subject(title)):
        if token.norm in _HEAD_END:
            break
        words += [part for part in token.norm.split("-") if part]
    kept = set(content_terms(" ".join(words), language))
    content = [w for w in words if w in kept]
    return frozenset(stem(w, language) for w in content[: tuning().head_words])


def reply_named_documents(
    question: str,
    reply: str | None,
    titles: Sequence[str],
    topic: str | None = None,
    language: str | None = None,
) -> list[str]:
    """The found pages a follow-up cannot choose between because the last reply named
    each of them and the turn only asks how much, when or how: a monthly-cost question
    after "inclua-o na assistência médica e na assistência odontológica". [] otherwise.

    A page is named when the reply says its title's subject (_head_stems); the turn asks
    only when none of its content words names a topic (asks.names_no_topic), and the
    conversation's own topic (its user's words) names none of the pages either."""
    if not reply:
        return []
    if any(not names_no_topic(w) for w in content_terms(question)):
        return []
    lang = language or "pt"

    def stems(text: str) -> frozenset[str]:  # a compound's parts as words of their own
        return frozenset(stem(t.norm, lang) for t in token_spans(text.replace("-", " ")))

    said, asked = stems(reply), stems(topic or "")
    named: dict[frozenset[str], str] = {}
    for title in titles:
        head = _headword_stems(title, lang)
        if head and head <= said:
            named.setdefault(head, title)
    if len(named) < 2 or any(head <= asked for head in named):
        return []
    return list(named.values())[:3]
