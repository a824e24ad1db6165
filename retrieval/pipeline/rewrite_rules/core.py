"""Rewrite a turn into self-contained search queries with rules and corpus statistics."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Literal

from retrieval.pipeline.ask_phrases import chosen_option
from retrieval.pipeline.asks import names_no_topic
from retrieval.pipeline.glossary import expand_with_glossary, find_glossary_hits
from retrieval.pipeline.languages import phrases
from retrieval.pipeline.rewrite_rules.context import (
    CarryPlan,
    Dependency,
    Turn,
    assess,
    frame_at,
    make_turn,
    plan_carry,
    points_back,
    render_phrase,
    topic_swap,
)
from retrieval.pipeline.rewrite_rules.cues import (
    FACETS,
    after_negation,
    correction_rest,
    is_hypothetical,
    names_earlier_topic,
    names_what_it_defines,
    opener_length,
    refers_to_start,
    return_rest,
    starts_clause,
)
from retrieval.pipeline.rewrite_rules.draft import Draft
from retrieval.pipeline.rewrite_rules.lexicon import (
    Stats,
    correct_spelling,
    word_parts,
)
from retrieval.pipeline.rewrite_rules.slots import place_variants, slot_of, slot_spans
from retrieval.pipeline.rewrite_rules.smalltalk import small_talk_kind
from retrieval.pipeline.rewrite_rules.split import split_questions
from retrieval.pipeline.text import (
    LANGUAGES,
    Language,
    Token,
    detect_language,
    is_placeholder,
    normalize,
    stopwords_for,
    token_spans,
)
from retrieval.pipeline.tuning import tuning
from retrieval.pipeline.types import (
    WORD_RULES,
    Clarification,
    GlossaryEntry,
    GlossaryHit,
    LexiconView,
    QueryType,
    RewriteInput,
    RewriteResult,
    SearchQuery,
)

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


Reading = Literal["standalone", "contextual"]
# Words of its own (beyond facets) up to which a question with nothing to carry may be too
# vague to search without asking which of its readings is meant.
# Content words up to which a turn that points back at nothing is only a pointer.
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
    guessed = detect_language(inp.question) or detect_language(f"{users} {inp.question}")
    if guessed is not None:
        return guessed
    return next((lang for lang in LANGUAGES if inp.default_language == lang), None)


def lexicon_words(inp: RewriteInput) -> set[str]:
    """Return the normalised words whose corpus statistics the rewrite needs.

    The question's words come first, then the user turns' from the newest, then the last
    reply's, up to LEXICON_LIMIT words. Words are carried from the last reply only when
    the user's own turns name nothing the documents know. Compound words
    ("vale-refeição") come with their parts, as the corpus counts them.
    """
    stopwords = stopwords_for(turn_language(inp))
    users = [m.text for m in reversed(inp.history) if m.role == "user"]
    reply = next((m.text for m in reversed(inp.history) if m.role == "assistant"), "")
    words: dict[str, None] = {}
    for text in [inp.question, *users, reply]:
        for term in make_turn(text, stopwords).terms:
            # A country's other names too: added to a query only where the corpus has them.
            others = [w for v in place_variants(term) for w in normalize(v).split()]
            for word in (term, *word_parts(term), *others):
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
    glossary_slots: Mapping[tuple[str, ...], str]
    mentions: Counter[str]  # in how many messages (the question's too) each word occurs
    result: Draft  # frozen into the RewriteResult at the end (_finish)
    question_terms: frozenset[str]  # the glossary terms the question itself uses
    topic: str = ""  # the words a follow-up carried, for the evidence search
    # The turn surely continues an earlier topic (a return to it, a restriction corrected).
    continues: bool = False


def _substitute(turn: Turn, dependency: Dependency, topic: str) -> str | None:
    """Put the topic where a neutral pronoun stands (a question of remedies "for it")."""
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
    if source == "part":
        return f"part {count + offset + 1}"
    return source if source == "the last reply" else f"{source} {offset}"


def _plan(ctx: _Context, part: Turn, dependency: Dependency, users: list[Turn]) -> CarryPlan:
    """Choose what `part` carries from the earlier user turns (see context.plan_carry)."""
    return plan_carry(
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


def _resolve(
    ctx: _Context, part: Turn, dependency: Dependency, users: list[Turn], label: str, source: str
) -> tuple[str, Dependency, bool, str | None]:
    """Return the query for one question (`dependency`: `assess`'s verdict on it), whether it
    took words from elsewhere, and the other reading of a bare follow-up that may change the
    topic (or None)."""
    fire = ctx.result.fire
    if source == "part" and dependency.kind in ("self", "weak"):
        # A later part asks its own question ("... y cómo pido un anticipo?") unless it is
        # a word or two (a yes/no question followed by its "how much" echo).
        short = len(set(part.terms)) < 2
        dependency = Dependency("weak", "short follow-up part") if short else Dependency("self")
    if not dependency.dependent:
        reason = "self-contained" if dependency.kind == "self" else "topic switch"
        fire("keep_as_asked", f"{label}{reason}: kept as asked")
        return part.text.strip(), dependency, False, None
    plan = _plan(ctx, part, dependency, users)
    if not plan.carried and source == "user turn" and dependency.kind in ("anaphor", "ellipsis"):
        # The user's own turns name nothing the documents know ("le robaron la laptop del
        # auto"): the last reply, written from the documents, says what the topic is
        # ("la política de equipos informáticos").
        reply = _last_reply(ctx)
        if reply is not None:
            users = [reply]
            plan = _plan(ctx, part, dependency, users)
            source = "the last reply"
    if not plan.carried:
        fire(
            "nothing_to_carry",
            f"{label}depends on context ({dependency.kind} '{dependency.cue}') "
            "but nothing to carry",
        )
        return part.text.strip(), dependency, False, None
    for old, new in plan.replaced:
        fire("substitute", f"{label}replaced '{old}' by '{new}'")
    for carried in plan.carried:
        fire(
            "carry_topic",
            f"{label}follow-up ({dependency.kind} '{dependency.cue}'): carried "
            f"'{carried.phrase}' from {_where(source, len(users), carried.offset)}",
        )
    ctx.topic = plan.phrase
    swap = topic_swap(part, dependency, plan, users, ctx.lang, ctx.stopwords)
    if swap:
        fire("topic_swap", f"{label}may also change the topic: searched '{swap}' too")
    return _compose(part, dependency, plan), dependency, True, swap


_FIGURES = re.compile(r"\S*\d\S*")


def _last_reply(ctx: _Context) -> Turn | None:
    """The conversation's last assistant message, as a turn to carry words from."""
    for message in reversed(ctx.inp.history):
        if message.role == "assistant" and message.text.strip():
            # Its figures ("0.61 m", "R$ 1.200") are what it answered, not the topic.
            return make_turn(_FIGURES.sub(" ", message.text), ctx.stopwords)
    return None


def _has_topic(ctx: _Context, users: list[Turn]) -> bool:
    """Tell whether any earlier user turn has a word worth carrying."""
    return any(ctx.stats.weight(w) >= tuning().common for turn in users for w in turn.terms)


def _clarification(ctx: _Context, users: list[Turn]) -> Clarification:
    """Ask in the user's language, offering the last two distinct things they asked."""
    options: list[str] = []
    for turn in reversed(users):
        phrase = _truncate(turn.text.strip(_EDGES), 80)
        if turn.terms and normalize(phrase) not in {normalize(o) for o in options}:
            options.append(phrase)
        if len(options) == 2:
            break
    return Clarification(phrases(ctx.lang).ask_for_details, tuple(options))


def _truncate(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut or text[:limit]


# A value written with thousands separators ("6.850", "4.381.226-7"): an amount or an
# identity number, never worth searching and personal more often than not.
_NUMBER_VALUE_RE = re.compile(r"^\d{1,3}(?:\.\d{3})+(?:,\d+)?(?:-\d{1,2})?$")
_SPACES_RE = re.compile(r"\s+([,.;:?!])|\s{2,}")


def clean_query(
    text: str, stats: Stats, protected: frozenset[str], stopwords: frozenset[str]
) -> str:
    """Drop what must never be searched: placeholders, amounts and unknown names.

    A capitalised word the corpus does not know and that is no place ("Mariana", "Kuhn")
    is a person's name more often than anything the documents could match.
    """
    return _without(text, unsearchable_tokens(text, stats, protected, stopwords))


def _without(text: str, dropped: Sequence[Token]) -> str:
    """`text` without the `dropped` words, its spacing and edges tidied."""
    pieces: list[str] = []
    cursor = 0
    for token in dropped:
        pieces.append(text[cursor : token.start])
        cursor = token.end
    pieces.append(text[cursor:])
    cleaned = _SPACES_RE.sub(lambda m: m.group(1) or " ", "".join(pieces))
    return cleaned.strip(" ,;:")


def unsearchable_tokens(
    text: str, stats: Stats, protected: frozenset[str], stopwords: frozenset[str]
) -> list[Token]:
    """The words of `text` that `clean_query` drops, in order."""
    dropped: list[Token] = []
    tokens = token_spans(text)
    # "Buenos Aires", "São Paulo": a place of several words is no one's name.
    places = {
        i
        for first, last, slot in slot_spans(tokens)
        if slot == "place"
        for i in range(first, last + 1)
    }
    for index, token in enumerate(tokens):
        surface = token.text
        before = text[: token.start].rstrip()
        sentence_start = not before or before[-1] in ".?!:;¿¡"
        name = (
            stats.available
            and surface[:1].isupper()
            and not surface.isupper()
            and not sentence_start
            and token.norm not in stopwords
            and token.norm not in protected
            and stats.nidf(token.norm) is None
            and slot_of(token.norm) is None
            and index not in places
        )
        if is_placeholder(surface) or bool(_NUMBER_VALUE_RE.match(surface)) or name:
            dropped.append(token)
    return dropped


def _glossary_senses(ctx: _Context, text: str) -> list[GlossaryHit]:
    """Return the glossary hits of `text` used as terms, noting the ones left as words.

    An entry that is also an ordinary word of the language ("vale": is valid; "home") is
    the term only after a determiner or preposition ("o vale", "no home"), alone, or in
    capitals; "isso vale para estagiário?" keeps its verb.
    """
    hits = find_glossary_hits(text, ctx.inp.glossary)
    common = ctx.stats.lexicon.language_words
    if not common:
        return hits
    tokens = token_spans(text)
    kept: list[GlossaryHit] = []
    for hit in hits:
        words = _words_of(hit.term)
        if len(words) != 1 or hit.term.isupper() or words[0] not in common:
            kept.append(hit)
            continue
        positions = [i for i, t in enumerate(tokens) if t.norm == words[0]]
        used = any(_used_as_term(tokens, i) for i in positions)
        if used:
            kept.append(hit)
        else:
            ctx.result.fire(
                "glossary_ordinary_word",
                f"glossary: '{hit.term}' read as the ordinary word here, not expanded",
            )
    return kept


_TERM_BEFORE = frozenset(
    """o a os as um uma uns umas no na nos nas do da dos das ao pelo pela pro pra meu minha
    meus minhas seu sua seus suas nosso nossa esse essa este esta desse dessa deste desta
    nesse nessa de com sem sobre el la los las un una unos unas del al en mi mis tu tus su sus
    ese esa este esta con sin the a an my your our his her their of for in on with about
    e y and""".split()
)


def _used_as_term(tokens: list[Token], index: int) -> bool:
    """Tell whether the word at `index` stands where a noun would (see _glossary_senses)."""
    token = tokens[index]
    if token.text.isupper() and len(token.text) > 1:
        return True
    if len(tokens) == 1:
        return True
    return index > 0 and tokens[index - 1].norm in _TERM_BEFORE


def _with_place_names(text: str, stats: Stats) -> str:
    """Name a country in the other languages too: "no Uruguai" -> "no Uruguai (Uruguay)".

    Only names the corpus has: an English collection gains nothing from "Alemanha
    Alemania" beside "East Germany", and the words pulled its queries off.
    """
    tokens = token_spans(text)
    present = {t.norm for t in tokens}
    df = stats.lexicon.df

    def known(name: str) -> bool:
        return not stats.available or all(df.get(w) for w in normalize(name).split())

    insertions: list[tuple[int, str]] = []
    for token in tokens:
        missing = [
            v for v in place_variants(token.norm) if normalize(v) not in present and known(v)
        ]
        if missing:
            insertions.append((token.end, f" ({' '.join(missing)})"))
            present.update(normalize(v) for v in missing)
    for position, insert in reversed(insertions):
        text = text[:position] + insert + text[position:]
    return text


def _add_query(
    ctx: _Context,
    text: str,
    query_type: QueryType,
    seen: set[str],
    reading: Reading | None = None,
) -> None:
    dropped = unsearchable_tokens(text, ctx.stats, ctx.protected, ctx.stopwords)
    if dropped:
        # The words themselves stay out of the note: a name or an amount left unmasked is
        # exactly what must not reach the trace.
        _fire_once(
            ctx,
            "drop_words",
            f"not searched: {len(dropped)} word(s) (a name, an amount or a placeholder)",
        )
    cleaned = _without(text, dropped)
    text = _with_place_names(cleaned, ctx.stats)
    if text != cleaned:
        _fire_once(ctx, "place_names", f"country named in the corpus's other languages: '{text}'")
    hits = _glossary_senses(ctx, text)
    expanded = expand_with_glossary(text, hits)
    if expanded != text and query_type == "normalize":
        query_type = "expand"
    for hit in hits:
        recorded = GlossaryHit(
            hit.term,
            hit.expansion,
            hit.area,
            "question" if hit.term in ctx.question_terms else "history",
        )
        if recorded not in ctx.result.glossary_hits:
            ctx.result.glossary_hits.append(recorded)
            ctx.result.fire(
                "glossary", f"glossary: {hit.term} -> {hit.expansion} ({recorded.source})"
            )
    final = _truncate(expanded, ctx.inp.max_query_chars)
    if len(" ".join(expanded.split())) > ctx.inp.max_query_chars:
        _fire_once(ctx, "truncate", f"cut at {ctx.inp.max_query_chars} characters")
    key = " ".join(normalize(final).split())
    if final and key not in seen:
        seen.add(key)
        # The area is only a ranking nudge; give it when the glossary terms agree on one.
        areas = {h.area for h in hits if h.area}
        area = areas.pop() if len(areas) == 1 else None
        ctx.result.queries.append(SearchQuery(final, query_type, area, reading=reading))


def _fire_once(ctx: _Context, rule: str, detail: str) -> None:
    """Fire `rule` unless it fired with this detail already (a follow-up's two readings)."""
    if not any(r.id == rule and r.detail == detail for r in ctx.result.fired):
        ctx.result.fire(rule, detail)


def _split(ctx: _Context, text: str) -> list[Turn]:
    def has_content(piece: str) -> bool:
        return bool(make_turn(piece, ctx.stopwords).terms)

    pieces = split_questions(text, ctx.lang, has_content)
    limit = max(1, ctx.inp.max_queries)
    if len(pieces) > limit:
        pieces = pieces[: limit - 1] + [" ".join(pieces[limit - 1 :])]
    turns = [make_turn(p, ctx.stopwords) for p in pieces]
    for i in range(1, len(turns)):
        if any(not names_no_topic(t) for t in turns[i].terms):
            continue
        # A question whose words only ask how much, when or how, or say a period ("… e
        # qual é o limite mensal?", "tem prazo?") asks about what the one before it named.
        topic = [t for t in turns[i - 1].terms if not names_no_topic(t)]
        if topic:
            own = turns[i].text.rstrip(_EDGES)
            turns[i] = make_turn(f"{own} {' '.join(dict.fromkeys(topic))}", ctx.stopwords)
    return turns


@lru_cache(maxsize=4096)
def _words_of(term: str) -> tuple[str, ...]:
    return tuple(t.norm for t in token_spans(term.replace("-", " ")))


@lru_cache(maxsize=32)
def _glossary_words(
    glossary: tuple[GlossaryEntry, ...],
) -> tuple[frozenset[str], Mapping[tuple[str, ...], str]]:
    """Return the glossary's words (never corrected) and its terms' slots by area.

    Cached by the entries themselves: every turn of a collection passes the same glossary,
    and an edited one is a different key.
    """
    glossary_words = {e: _words_of(e.term) for e in glossary}
    protected = frozenset(w for words in glossary_words.values() for w in words)
    glossary_slots = {
        words: f"glossary area {e.area}" for e, words in glossary_words.items() if e.area
    }
    return protected, glossary_slots


def _make_context(inp: RewriteInput, lexicon: LexiconView) -> _Context:
    lang = turn_language(inp)
    stopwords = stopwords_for(lang)
    protected, glossary_slots = _glossary_words(inp.glossary)
    messages = [inp.question, *(m.text for m in inp.history)]
    mentions = Counter(w for text in messages for w in set(make_turn(text, stopwords).terms))
    result = Draft()
    question_terms = frozenset(h.term for h in find_glossary_hits(inp.question, inp.glossary))
    return _Context(
        inp,
        lang,
        stopwords,
        Stats(lexicon),
        protected,
        glossary_slots,
        mentions,
        result,
        question_terms,
    )


def _ask_to_clarify(ctx: _Context, users: list[Turn]) -> None:
    ctx.result.needs_clarification = True
    ctx.result.clarify_reason = "pointer"
    ctx.result.clarification = _clarification(ctx, users)
    ctx.result.fire("ask_pointer", "refers to something not in the conversation: asked to clarify")


def _chosen_option(ctx: _Context) -> bool:
    """Search an option of the last question back with the question it answers.

    An option clicked (or typed) after "Você quer saber sobre X, Y ou Z?" is a title: alone
    it loses what the person asked of it ("cobre dentista?" with "Plano odontológico"), so
    the option and the user's turn before the question back are searched together.
    """
    history = ctx.inp.history
    if len(history) < 2 or history[-1].role != "assistant" or history[-2].role != "user":
        return False
    option = chosen_option(ctx.inp.question, history[-1].text)
    if option is None:
        return False
    asked = history[-2].text.strip()
    ctx.result.topic = option
    ctx.result.fire(
        "chosen_option", f"option chosen: '{option}' searched with the question it answers"
    )
    # Its placeholders, amounts and names are dropped as any query's are (_add_query).
    _add_query(ctx, f"{option} {asked}", "expand", set(), reading="contextual")
    ctx.result.safe_original = clean_query(
        ctx.inp.question, ctx.stats, ctx.protected, ctx.stopwords
    )
    return True


def _clarify_terms(ctx: _Context, part: Turn) -> tuple[str, ...]:
    """Return a short, unspecific question's words (see RewriteResult.clarify_terms).

    A glossary term, a number, a place or more than a few words make a question specific.
    """
    if ctx.result.glossary_hits or any(t.norm[:1].isdigit() for t in part.tokens):
        return ()
    terms = tuple(dict.fromkeys(part.terms))
    if any(slot_of(w) == "place" for w in terms):
        return ()
    # A word neither the documents nor the dictionary know is a typo left uncorrected, and
    # an acronym nobody put in the glossary ("TRI") names one thing: the titles cannot be
    # compared with what was meant. Search it; weak results reach the staff's panel.
    known = ctx.stats.lexicon.language_words
    if ctx.stats.available and any(ctx.stats.nidf(w) is None and w not in known for w in terms):
        return ()
    if any(t.text.isupper() and len(t.text) > 1 and t.norm in terms for t in part.tokens):
        return ()
    own = [w for w in terms if w not in FACETS]
    return terms if 0 < len(own) <= tuning().short_question_terms else ()


def _add_readings(
    ctx: _Context,
    part: Turn,
    dependency: Dependency,
    query: str,
    carried: bool,
    users: list[Turn],
    seen: set[str],
) -> None:
    """Offer a follow-up's two readings: on its own, and with the conversation's topic.

    Words alone cannot tell "conta pro trajeto até o cliente?" (a follow-up) from "e o
    auxílio-creche, qual o valor?" (a new topic); the search evidence decides between the
    two readings (retrieval.pipeline.evidence), HQE's idea with retrieval as the predictor.
    """
    standalone = part.text.strip()
    contextual = query
    if not carried and names_what_it_defines(part.tokens, ctx.lang):
        # a "what are <acronym> <noun>?" after another subject names what it asks about: the
        # conversation's words would only pull its own pages up.
        ctx.result.fire("asks_definition", "asks what a thing it names in full is: kept as asked")
        _add_query(ctx, query, "normalize", seen)
        return
    if not carried:
        plan = _plan(ctx, part, Dependency("weak", "implicit"), users)
        if not plan.carried:
            _add_query(ctx, query, "normalize", seen)
            return
        ctx.topic = plan.phrase
        contextual = f"{standalone.rstrip(_EDGES)} {plan.phrase}"
        how = "searched with it" if ctx.continues else "searched with and without it"
        ctx.result.fire("maybe_follow_up", f"may follow up on '{plan.phrase}': {how}")
    ctx.result.topic = clean_query(ctx.topic, ctx.stats, ctx.protected, ctx.stopwords) or None
    if ctx.continues or (carried and points_back(part, dependency, ctx.lang, ctx.stopwords)):
        # "e para PJ?": only the topic-aware reading; the user's words alone would pull up
        # a sibling (another country's, another audience's page).
        _add_query(ctx, contextual, "expand", seen, reading="contextual")
        return
    ctx.result.new_terms = tuple(
        w
        for w in dict.fromkeys(part.terms)
        if ctx.mentions.get(w, 0) <= 1
        and (w in ctx.protected or ctx.stats.weight(w) >= tuning().strong)
    )
    _add_query(ctx, contextual, "expand", seen, reading="contextual")
    _add_query(ctx, standalone, "normalize", seen, reading="standalone")


def _names_content(ctx: _Context, word: str) -> bool:
    """Tell whether the knowledge base knows `word` as content: a glossary term, or a word
    its chunks hold rarely enough to tell a topic (never a spelling guess: "vlw" is not a
    misspelt corpus word). Without corpus statistics every word might be content."""
    if word in ctx.protected or not ctx.stats.available:
        return True
    df = ctx.stats.lexicon.df.get(word)
    n = ctx.stats.lexicon.n_chunks
    if not df:
        return False
    return math.log(n / min(df, n)) / math.log(n) >= tuning().small_talk_content


def rewrite_with_rules(inp: RewriteInput, lexicon: LexiconView) -> RewriteResult:
    """Rewrite `inp.question` into at most `inp.max_queries` self-contained queries.

    Never raises for any text; the caller searches the original question as well.
    """
    ctx = _make_context(inp, lexicon)
    result = ctx.result
    kind = small_talk_kind(inp.question, partial(_names_content, ctx))
    if kind is not None:
        result.no_search = True
        result.small_talk = kind
        result.fire("small_talk", f"small talk ({kind}): replied without searching")
        return result.build()
    text, result.corrections = correct_spelling(
        inp.question, ctx.stats, ctx.protected, ctx.stopwords
    )
    for wrong, right in result.corrections.items():
        result.fire("spelling", f"spelling: '{wrong}' -> '{right}'")
    users = [make_turn(m.text, ctx.stopwords) for m in inp.history if m.role == "user"]
    if users and _chosen_option(ctx):
        return _finish(inp, result)
    to_start = refers_to_start(make_turn(text, ctx.stopwords).tokens)
    if to_start and not inp.earlier_messages:
        # "voltando ao primeiro assunto": the first question names the topic, not the last.
        users = users[:1]
    elif to_start:
        # The first topic lies before the window: asking beats guessing from what is left,
        # and the window's latest topic is the one the user just left.
        users = []
        result.needs_clarification = True
        result.clarify_reason = "out_of_sight"
        result.clarification = Clarification(phrases(ctx.lang).ask_for_the_topic_out_of_sight)
        result.fire(
            "ask_out_of_sight", "refers to the start of the conversation, outside the window"
        )
    seen: set[str] = set()
    meant = None
    if users and not to_start:
        meant = correction_rest(text) or _names_instead(ctx, text, users[-1])
    if meant is not None and _restricts(ctx, meant):
        # "no, I meant for contractors": the topic was right, its restriction was not; the
        # restriction is read as "e para PJ?" is, a new value replacing the old one.
        result.fire("correction", f"corrects the reading's restriction: searched '{meant}'")
        text, ctx.continues = meant, True
    elif meant is not None and (corrected := _correction(ctx, meant, users[-1])):
        _add_query(ctx, corrected[0], "expand", seen, reading="contextual")
        _add_query(ctx, corrected[1], "normalize", seen, reading="standalone")
        return _finish(inp, result)
    elif users and not to_start:
        text, users = _return(ctx, text, users)
    parts = _split(ctx, text)
    resolved: list[Turn] = []
    own: list[Turn] = []  # the parts as the user wrote them
    for index, part in enumerate(parts):
        label = f"part {index + 1}: " if len(parts) > 1 else ""
        # A later part leans on the parts before it ("... e o que acontece no meio?").
        context, source = (users, "user turn") if index == 0 else (resolved, "part")
        assessed = assess(part, ctx.lang, ctx.stats, ctx.protected, ctx.mentions)
        named = [
            p for p in own if any(ctx.stats.is_strong(w) or w in ctx.protected for w in p.terms)
        ]
        if named and assessed.kind == "anaphor":
            # "What about <subject>? did it ...?": "it" is what the part
            # before named itself, not the flu that part carried from the conversation (a
            # part that names nothing, "e isso?", lends what it carried).
            context = named
        own.append(part)
        query, dependency, carried, swap = _resolve(ctx, part, assessed, context, label, source)
        pointing = dependency.kind in ("anaphor", "ellipsis")
        # "e isso?", "y en Chile?" with nothing before them; a longer turn names its own
        # subject (a where-does question about a named character). Still searched.
        vague = len(set(part.terms)) <= tuning().pointing_alone_terms
        if index == 0 and pointing and vague and not carried and not _has_topic(ctx, users):
            _ask_to_clarify(ctx, users)
        query_type: QueryType = "expand" if carried else "normalize"
        if len(parts) > 1:
            query, query_type = query.strip(_EDGES), "decompose"
        resolved.append(make_turn(query, ctx.stopwords))
        if len(parts) == 1 and users and dependency.kind != "switch":
            _add_readings(ctx, part, dependency, query, carried, users, seen)
        else:
            _add_query(ctx, query, query_type, seen)
        if swap and len(parts) == 1:
            _add_query(ctx, swap, "multi_query", seen)
    if len(parts) > 1:
        result.fire("split", f"split into {len(parts)} questions")
    elif not users:
        result.clarify_terms = _clarify_terms(ctx, parts[0])
    result.safe_original = clean_query(inp.question, ctx.stats, ctx.protected, ctx.stopwords)
    return _finish(inp, result)


def _finish(inp: RewriteInput, result: Draft) -> RewriteResult:
    result.queries = result.queries[: max(0, inp.max_queries)]
    if not inp.history and not inp.earlier_messages:
        _first_turn_as_asked(inp, result)
    return result.build()


def _names_instead(ctx: _Context, text: str, previous: Turn) -> str | None:
    """A bare correction: a leading negation, then only a noun phrase naming a topic the
    previous turn did not ("não, o odontológico", "no, attachments"); a question or a
    continuation after the negation ("não, e para PJ?", "no, how long?") is no correction."""
    rest = after_negation(text)
    if rest is None:
        return None
    named = make_turn(rest, ctx.stopwords)
    if starts_clause(named.tokens[:2], ctx.lang) or opener_length(named.tokens, ctx.lang):
        return None
    if len(set(named.terms)) > tuning().bare_correction_terms:
        return None
    new = [w for w in named.terms if w not in previous.terms and ctx.stats.is_strong(w)]
    return rest if new else None


def _restricts(ctx: _Context, meant: str) -> bool:
    """Whether what a correction says was meant is a restriction of the topic: a phrase
    after a preposition ("para PJ", "for contractors") or a value of a slot ("Chile")."""
    named = make_turn(meant, ctx.stopwords)
    if frame_at(named.tokens, 0, ctx.lang, ctx.stopwords) is not None:
        return True
    return bool(named.terms) and all(slot_of(w) is not None for w in named.terms)


def _correction(ctx: _Context, meant: str, previous: Turn) -> tuple[str, str] | None:
    """A correction of the reading's two queries: what was meant with what the previous
    turn asked about it, and what was meant alone; None for any other turn.

    "não, era o do plano odontológico" after "quanto custa o plano de saúde?" says the
    previous turn was read on the wrong topic: the topic it carried, or, when it named its
    own, its rarer words, are dropped; what it asked (how much, the deadline) is kept.
    """
    named = make_turn(meant, ctx.stopwords)
    if not named.terms:
        return None
    own = set(named.terms)
    kind = assess(previous, ctx.lang, ctx.stats, ctx.protected, ctx.mentions).kind
    if kind in ("anaphor", "ellipsis", "weak"):
        # It carried the misread topic; its own words are what it asked.
        kept = {w for w in previous.terms if w not in own}
    else:
        kept = {
            w
            for w in previous.terms
            if w not in own and (w in FACETS or not ctx.stats.is_strong(w))
        }
    asked = render_phrase(previous.tokens, kept)
    ctx.result.fire(
        "correction",
        f"corrects the reading: searched '{meant.strip(_EDGES)}'"
        + (f" with '{asked}'" if asked else "")
        + ", the previous topic dropped",
    )
    ctx.result.topic = clean_query(meant, ctx.stats, ctx.protected, ctx.stopwords) or None
    meant = meant.strip(_EDGES)
    return (f"{meant} {asked}".strip(), meant)


_CLAUSE_END = re.compile(r"[,;:?!.]")


def _return(ctx: _Context, text: str, users: list[Turn]) -> tuple[str, list[Turn]]:
    """A return to an earlier topic ("voltando ao reembolso, qual o prazo?"): the
    question without its opener, and the user turns up to the newest one that named that
    topic, so the turn carries it rather than the last one. Any other turn comes back as it
    was."""
    rest = return_rest(text)
    if rest is not None:
        mark = _CLAUSE_END.search(rest)
        named = make_turn(rest[: mark.start()] if mark else rest, ctx.stopwords).terms
        asked = rest[mark.end() :].strip() if mark else ""
    elif names_earlier_topic(text):
        # The topic is named somewhere in the turn ("e o reembolso que perguntei antes?").
        rest = asked = text
        named = tuple(w for w in make_turn(text, ctx.stopwords).terms if ctx.stats.is_strong(w))
    else:
        return text, users
    for index in range(len(users) - 1, -1, -1):
        if any(_same_word(w, t) for w in named for t in users[index].terms):
            break
    else:
        return text, users
    ctx.continues = True
    ctx.result.fire(
        "return",
        f"returns to an earlier topic: carried from user turn {index - len(users)}",
    )
    if not make_turn(asked, ctx.stopwords).terms:
        asked = rest
    return asked, users[: index + 1]


def _same_word(one: str, other: str) -> bool:
    """The same word, or one of its inflections ("reembolso", "reembolsos")."""
    size = tuning().return_stem
    return one == other or (min(len(one), len(other)) >= size and one[:size] == other[:size])


def _first_turn_as_asked(inp: RewriteInput, result: Draft) -> None:
    """A turn with nothing before it searches its words as typed, as the no-rewrite mode
    does, unless a rule that changes words fired (types.WORD_RULES): the trace names it.

    The rules' own reading of a self-contained question (its edges trimmed, its spacing
    tidied) differed from the words as typed only in form, yet then searched them a second
    time as the user's own words; first turns scored below the no-rewrite mode where nothing
    needed rewriting (issue 36: self-contained first questions R@5 .875 against .925).
    Either the rules' queries stand, with the rule named, or the words as typed alone.
    """
    if not result.queries or not inp.question.strip():
        return  # nothing searched (max_queries 0, an empty message): nothing to restore
    if result.no_search or any(r.id in WORD_RULES for r in result.fired):
        return
    question = inp.question
    if len(question) > inp.max_query_chars:
        # Past the query limit the words as typed are cut like any query (and said so).
        question = _truncate(question, inp.max_query_chars)
        result.fire("truncate", f"cut at {inp.max_query_chars} characters")
    result.queries = [SearchQuery(question, "normalize")]
    result.safe_original = question
