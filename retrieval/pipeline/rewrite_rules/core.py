"""Rewrite a turn into self-contained search queries with rules and corpus statistics."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from retrieval.pipeline.glossary import expand_with_glossary, find_glossary_hits
from retrieval.pipeline.rewrite_rules.context import (
    CarryPlan,
    Dependency,
    Turn,
    assess,
    make_turn,
    plan_carry,
    topic_swap,
)
from retrieval.pipeline.rewrite_rules.cues import is_hypothetical
from retrieval.pipeline.rewrite_rules.lexicon import (
    COMMON,
    Stats,
    correct_spelling,
    word_parts,
)
from retrieval.pipeline.rewrite_rules.split import split_questions
from retrieval.pipeline.text import (
    LANGUAGES,
    Language,
    detect_language,
    normalize,
    stopwords_for,
    token_spans,
)
from retrieval.pipeline.types import (
    Clarification,
    GlossaryHit,
    LexiconView,
    QueryType,
    RewriteInput,
    RewriteResult,
    SearchQuery,
)

_CLARIFY: dict[str, str] = {
    "pt": "Pode dar mais detalhes? Sobre qual assunto é a sua pergunta?",
    "es": "¿Puede dar más detalles? ¿Sobre qué tema es su pregunta?",
    "en": "Could you give more details? What topic is your question about?",
}
# Neutral pronouns replaced by the carried topic in place, with the preposition they
# contain: "qual o prazo disso?" -> "qual o prazo de reembolso de despesas?".
_SUBSTITUTES: dict[str, str] = {
    "isso": "{}",
    "isto": "{}",
    "aquilo": "{}",
    "disso": "de {}",
    "disto": "de {}",
    "nisso": "em {}",
    "eso": "{}",
    "esto": "{}",
    "aquello": "{}",
    "it": "{}",
    # A clause ending in "no meio" / "durante" / "during" names its reference after it.
    "meio": "meio de {}",
    "durante": "durante {}",
    "depois": "depois de {}",
    "antes": "antes de {}",
    "medio": "medio de {}",
    "despues": "después de {}",
    "during": "during {}",
    "middle": "middle of {}",
    "after": "after {}",
    "afterwards": "after {}",
    "before": "before {}",
}


# The caller looks up at most this many words in one query.
LEXICON_LIMIT = 200
_EDGES = " ¿?¡!.,;:"
_DROPPABLE = frozenset("e y and but mas pero ok okay so then entendi certo bueno".split())


def turn_language(inp: RewriteInput) -> Language | None:
    """Return the turn's language: the given one, else guessed from the user's words."""
    for lang in LANGUAGES:
        if inp.language == lang:
            return lang
    users = " ".join(m.text for m in inp.history if m.role == "user")
    return detect_language(inp.question) or detect_language(f"{users} {inp.question}")


def lexicon_words(inp: RewriteInput) -> set[str]:
    """Return the normalised words whose corpus statistics the rewrite needs.

    The question's words come first, then the user turns' from the newest, up to
    LEXICON_LIMIT words. Nothing is carried from assistant replies (they are only looked
    at to tell whether a name is new), so their words need no statistics. Compound words
    ("vale-refeição") come with their parts, as the corpus counts them.
    """
    stopwords = stopwords_for(turn_language(inp))
    users = [m.text for m in reversed(inp.history) if m.role == "user"]
    words: dict[str, None] = {}
    for text in [inp.question, *users]:
        for term in make_turn(text, stopwords).terms:
            for word in (term, *word_parts(term)):
                if len(words) >= LEXICON_LIMIT:
                    return set(words)
                words[word] = None
    return set(words)


@dataclass
class _Context:
    inp: RewriteInput
    lang: Language | None
    stopwords: frozenset[str]
    stats: Stats
    protected: frozenset[str]
    glossary_slots: dict[tuple[str, ...], str]
    mentions: Counter[str]  # in how many messages (the question's too) each word occurs
    result: RewriteResult


def _substitute(turn: Turn, dependency: Dependency, topic: str) -> str | None:
    """Put the topic where the pronoun stands ("Any cures for it?"), when it is neutral."""
    if dependency.kind != "anaphor" or not 0 <= dependency.position < len(turn.tokens):
        return None
    token = turn.tokens[dependency.position]
    template = _SUBSTITUTES.get(token.norm)
    if template is None:
        return None
    return turn.text[: token.start] + template.format(topic) + turn.text[token.end :]


def _kept_from(turn: Turn, dependency: Dependency) -> int:
    """Return the index of the first word of the turn worth keeping in the query.

    An elliptical turn loses its opener but keeps the "se"/"if" of a hypothetical ("e se
    eu estiver de férias?"); any other turn loses only leading chatter and conjunctions.
    """
    if dependency.kind == "ellipsis":
        return dependency.opener - is_hypothetical(turn.tokens, dependency.opener)
    kept = 0
    while kept < dependency.opener and turn.tokens[kept].norm in _DROPPABLE:
        kept += 1
    return min(kept, dependency.position) if dependency.position >= 0 else kept


def _compose(turn: Turn, dependency: Dependency, plan: CarryPlan) -> str:
    """Join the carried topic and the turn into one query."""
    topic = plan.phrase
    kept = _kept_from(turn, dependency)
    start = turn.tokens[kept].start if kept < len(turn.tokens) else 0
    rest = turn.text[start:].strip(_EDGES)
    if dependency.kind == "ellipsis":
        return f"{topic} {rest}"
    substituted = _substitute(turn, dependency, topic)
    if substituted:
        return substituted[start:].strip(_EDGES)
    return f"{rest} {topic}"


def _where(source: str, count: int, offset: int) -> str:
    return f"part {count + offset + 1}" if source == "part" else f"{source} {offset}"


def _resolve(
    ctx: _Context, part: Turn, users: list[Turn], label: str, source: str
) -> tuple[str, Dependency, bool, str | None]:
    """Return the query for one question, whether it took words from elsewhere, and the
    other reading of a bare follow-up that may change the topic (or None)."""
    notes = ctx.result.notes
    dependency = assess(part, ctx.lang, ctx.stats, ctx.protected, ctx.mentions)
    if source == "part" and dependency.kind in ("self", "weak"):
        # A later part asks its own question ("... y cómo pido un anticipo?") unless it is
        # a word or two ("is india growing fast? how fast?").
        short = len(set(part.terms)) < 2
        dependency = Dependency("weak", "short follow-up part") if short else Dependency("self")
    if not dependency.dependent:
        reason = "self-contained" if dependency.kind == "self" else "topic switch"
        notes.append(f"{label}{reason}: kept as asked")
        return part.text.strip(), dependency, False, None
    plan = plan_carry(
        part,
        dependency,
        users,
        ctx.lang,
        ctx.stats,
        ctx.stopwords,
        ctx.protected,
        ctx.glossary_slots,
        ctx.mentions,
    )
    if not plan.carried:
        notes.append(
            f"{label}depends on context ({dependency.kind} '{dependency.cue}') but nothing to carry"
        )
        return part.text.strip(), dependency, False, None
    for old, new in plan.replaced:
        notes.append(f"{label}replaced '{old}' by '{new}'")
    for carried in plan.carried:
        notes.append(
            f"{label}follow-up ({dependency.kind} '{dependency.cue}'): carried "
            f"'{carried.phrase}' from {_where(source, len(users), carried.offset)}"
        )
    swap = topic_swap(part, dependency, plan, users, ctx.lang, ctx.stopwords)
    if swap:
        notes.append(f"{label}may also change the topic: searched '{swap}' too")
    return _compose(part, dependency, plan), dependency, True, swap


def _has_topic(ctx: _Context, users: list[Turn]) -> bool:
    """Tell whether any earlier user turn has a word worth carrying."""
    return any(ctx.stats.weight(w) >= COMMON for turn in users for w in turn.terms)


def _clarification(ctx: _Context, users: list[Turn]) -> Clarification:
    """Ask in the user's language, offering the last two distinct things they asked."""
    options: list[str] = []
    for turn in reversed(users):
        phrase = _truncate(turn.text.strip(_EDGES), 80)
        if turn.terms and normalize(phrase) not in {normalize(o) for o in options}:
            options.append(phrase)
        if len(options) == 2:
            break
    return Clarification(_CLARIFY.get(ctx.lang or "pt", _CLARIFY["pt"]), tuple(options))


def _truncate(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut or text[:limit]


def _add_query(ctx: _Context, text: str, query_type: QueryType, seen: set[str]) -> None:
    hits = find_glossary_hits(text, ctx.inp.glossary)
    question_terms = {h.term for h in find_glossary_hits(ctx.inp.question, ctx.inp.glossary)}
    expanded = expand_with_glossary(text, hits)
    if expanded != text and query_type == "normalize":
        query_type = "expand"
    for hit in hits:
        recorded = GlossaryHit(
            hit.term,
            hit.expansion,
            hit.area,
            "question" if hit.term in question_terms else "history",
        )
        if recorded not in ctx.result.glossary_hits:
            ctx.result.glossary_hits.append(recorded)
            ctx.result.notes.append(f"glossary: {hit.term} -> {hit.expansion} ({recorded.source})")
    final = _truncate(expanded, ctx.inp.max_query_chars)
    key = " ".join(normalize(final).split())
    if final and key not in seen:
        seen.add(key)
        # The area is only a ranking nudge; give it when the glossary terms agree on one.
        areas = {h.area for h in hits if h.area}
        area = areas.pop() if len(areas) == 1 else None
        ctx.result.queries.append(SearchQuery(final, query_type, area))


def _split(ctx: _Context, text: str) -> list[Turn]:
    def has_content(piece: str) -> bool:
        return bool(make_turn(piece, ctx.stopwords).terms)

    pieces = split_questions(text, ctx.lang, has_content)
    limit = max(1, ctx.inp.max_queries)
    if len(pieces) > limit:
        pieces = pieces[: limit - 1] + [" ".join(pieces[limit - 1 :])]
    return [make_turn(p, ctx.stopwords) for p in pieces]


def _words_of(term: str) -> tuple[str, ...]:
    return tuple(t.norm for t in token_spans(term.replace("-", " ")))


def _make_context(inp: RewriteInput, lexicon: LexiconView) -> _Context:
    lang = turn_language(inp)
    stopwords = stopwords_for(lang)
    glossary_words = {e: _words_of(e.term) for e in inp.glossary}
    protected = frozenset(w for words in glossary_words.values() for w in words)
    glossary_slots = {
        words: f"glossary area {e.area}" for e, words in glossary_words.items() if e.area
    }
    messages = [inp.question, *(m.text for m in inp.history)]
    mentions = Counter(w for text in messages for w in set(make_turn(text, stopwords).terms))
    result = RewriteResult(queries=[], backend="rules")
    return _Context(
        inp, lang, stopwords, Stats(lexicon), protected, glossary_slots, mentions, result
    )


def _ask_to_clarify(ctx: _Context, users: list[Turn]) -> None:
    ctx.result.needs_clarification = True
    ctx.result.clarification = _clarification(ctx, users)
    ctx.result.notes.append("refers to something not in the conversation: asked to clarify")


def rewrite_with_rules(inp: RewriteInput, lexicon: LexiconView) -> RewriteResult:
    """Rewrite `inp.question` into at most `inp.max_queries` self-contained queries.

    Never raises for any text; the caller searches the original question as well.
    """
    ctx = _make_context(inp, lexicon)
    result = ctx.result
    text, result.corrections = correct_spelling(
        inp.question, ctx.stats, ctx.protected, ctx.stopwords
    )
    for wrong, right in result.corrections.items():
        result.notes.append(f"spelling: '{wrong}' -> '{right}'")
    users = [make_turn(m.text, ctx.stopwords) for m in inp.history if m.role == "user"]
    parts = _split(ctx, text)
    seen: set[str] = set()
    resolved: list[Turn] = []
    for index, part in enumerate(parts):
        label = f"part {index + 1}: " if len(parts) > 1 else ""
        # A later part leans on the parts before it ("... e o que acontece no meio?").
        context, source = (users, "user turn") if index == 0 else (resolved, "part")
        query, dependency, carried, swap = _resolve(ctx, part, context, label, source)
        pointing = dependency.kind in ("anaphor", "ellipsis")
        if index == 0 and pointing and not carried and not _has_topic(ctx, users):
            _ask_to_clarify(ctx, users)  # "e isso?" with nothing before it; still search
        query_type: QueryType = "expand" if carried else "normalize"
        if len(parts) > 1:
            query, query_type = query.strip(_EDGES), "decompose"
        resolved.append(make_turn(query, ctx.stopwords))
        _add_query(ctx, query, query_type, seen)
        if swap and len(parts) == 1:
            _add_query(ctx, swap, "multi_query", seen)
    if len(parts) > 1:
        result.notes.append(f"split into {len(parts)} questions")
    result.queries = result.queries[: max(0, inp.max_queries)]
    return result
