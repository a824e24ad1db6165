"""Ask back, naming the pages, where the search evidence shows a turn's readings split.

The rewriter asks back on the words alone (a pointer with nothing before it, the start of the
conversation out of sight: `rewrite_rules.core`); this module decides, once the searches
ran, whether the pages found make the turn ambiguous. `evidence_ask_back` is the only
caller-facing function: it returns what to ask, or None, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .evidence import ambiguous_documents, clarification_question, reply_named_documents
from .fusion import Hit, MergedHit
from .text import content_terms, detect_language
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
    asked = _after_a_reply_naming_pages(
        rewrite, queries, merged, reply_hits, window, question, language
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
