"""The extractive answer (pure): the passages' own sentences, chosen for the question.

Used when no model server is configured (or it failed). It never writes a claim of its own:
every line is a sentence, list item, table row or numbered step of a passage, cited [n].
How a line is chosen:
- words weighted by rarity (the corpus's document frequencies when the caller passes them,
  else the passages' own), from the question, the rewritten queries and glossary expansions;
  words meet through the turn language's Snowball stem ("agendo" finds "agendamento");
- the kind of answer asked for ("quanto tempo / prazo" wants a duration or date, "quanto /
  valor" an amount, "posso / tenho direito" the deciding condition, "como / onde" the steps
  and the place) lifts the lines that have one;
- lines far below the best one are dropped; the answer comes from the best passage's
  document, and another document only adds lines when it answers words of the question that
  the first document does not have (two topics in one message), so a sibling's rules are
  never mixed in; each part of a message the rewrite split answers from the document its
  own query ranked first (unless an earlier part answers from it and another document says
  the words it lacks), and leaves to a later part the lines that part fits better;
- a page that sends the reader to another shown page for what is asked ("as regras de perda
  estão em política específica") yields to that page when it fits nearly as well;
- blocks answer whole: the steps of a numbered procedure stay together with their numbers
  (a short procedure comes whole whatever is asked, any when the question asks how), and a
  chosen row of a short table brings the table's other rows; the most direct line comes
  first;
- a word of a line's section heading counts for the line (a passage is one section of its
  page: a chunk never crosses a heading), and the "why" names each line's section.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import numpy as np
import numpy.typing as npt
from text_to_num import alpha2digit

from ..asks import COUNTING_WORDS, CUE_WORDS, AnswerKind, answer_kind
from ..rewrite_rules.cues import after_switch_announcement
from ..rewrite_rules.lexicon import edit_distance
from ..rewrite_rules.slots import cases_in
from ..text import (
    Token,
    detect_language,
    is_content_word,
    is_placeholder,
    normalize,
    stem,
    stopwords_for,
    title_subject,
    token_spans,
)
from ..tuning import tuning
from ..types import HistoryMessage, QueryVectors, RewriteResult
from .grounded import Passage, label
from .line_model import line_model, recorder

_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=[A-ZÀ-ÖØ-Þ0-9¿¡\"“(])")
_STEP = re.compile(r"^\s*(\d{1,2})[.)]\s+(.*)$")
_ITEM = re.compile(r"^\s*[-*•]\s+(.*)$")
_ROW = re.compile(r"^\s*\|(.*)\|\s*$")
_RULE_ROW = re.compile(r"^[\s|:-]+$")
_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")

_MONTHS = (
    "janeiro|fevereiro|marco|abril|maio|junho|julho|agosto|setembro|outubro|novembro|"
    "dezembro|enero|febrero|marzo|mayo|junio|julio|septiembre|setiembre|octubre|"
    "noviembre|diciembre|january|february|march|april|may|june|july|august|september|"
    "october|november|december"
)
_KIND_EVIDENCE: dict[AnswerKind, re.Pattern[str]] = {
    "duration": re.compile(
        r"\b\d+\s*(?:a\s+\d+\s+)?(?:dias?|meses|mes|anos?|semanas?|horas?|h|minutos|"
        r"days?|months?|years?|weeks?|hours?)\b|\bdia\s+\d+|\bdias?\s+uteis\b|"
        r"\bdias?\s+(?:corridos|habiles|naturales|laborables)\b|"
        rf"\b\d{{1,2}}(?:º|o)?\s+de\s+(?:{_MONTHS})\b|\b(?:{_MONTHS})\b|"
        r"\b(?:ate|antes|depois|apos|hasta|desde|within|before|after|until)\b[^.]{0,30}\d|"
        # how often, and the time of day
        r"\b(?:a cada|cada)\s+\d|\b(?:uma|duas|una|dos) vez(?:es)?\b|\b(?:once|twice|every)\b|"
        r"\b\d{1,2}(?::\d{2}|h\d{2})\b"
    ),
    "amount": re.compile(
        r"(?:r\$|us\$|\$u|€|\$|eur\b|usd\b|pesos\b|reais\b)\s*\d|\d+(?:[.,]\d+)*\s*"
        r"(?:%|€|pesos|reais|euros|dolares|dollars)|\b\d+/\d+\b|\bsalarios?\s+(?:base|minimo)"
    ),
    "condition": re.compile(
        r"\b(?:so|somente|apenas|exclusivo|desde que|salvo|exceto|nao|nem|sem|caso|se|"
        r"sempre que|a partir|solo|solamente|siempre que|no|ni|sin|excepto|si|only|"
        r"unless|except|not|no|if|provided)\b"
    ),
    "steps": re.compile(
        r"\b(?:portal|sistema|aplicativo|app|formulario|chamado|e-?mail|@|pelo|pela|"
        r"no lumen|en lumen|modulo|opcao|opcion|envie|envia|registre|registra|solicite|"
        r"solicita|acesse|accede|marque|peca|pida|submit|portal|form|ticket)\b|>"
    ),
}

# The words that state a condition or a permission, in each language: Portuguese "no" is
# "in the" ("no portal"), Spanish "se" a pronoun ("se paga"); neither decides anything.
_CONDITION: dict[str, re.Pattern[str]] = {
    "pt": re.compile(
        r"\b(?:so|somente|apenas|exclusivo|exclusivamente|desde que|salvo|exceto|nao|nem|sem|"
        r"caso|se|sempre que|a partir|pode|podem|tem direito)\b"
    ),
    "es": re.compile(
        r"\b(?:solo|solamente|exclusivo|exclusivamente|desde que|siempre que|salvo|excepto|"
        r"no|ni|sin|si|a partir|en caso|puede|pueden|tiene derecho|tienen derecho)\b"
    ),
    "en": re.compile(
        r"\b(?:only|unless|except|not|no|if|provided|without|can|may|entitled|eligible)\b"
    ),
}


def _states(kind: AnswerKind, norm: str, language: str) -> bool:
    """Whether a line (normalised) states what the question asks for; a figure written in
    words ("cento e vinte dias") states it as the digits do."""
    if kind == "condition" and language in _CONDITION:
        return bool(_CONDITION[language].search(norm))
    evidence = _KIND_EVIDENCE[kind]
    return bool(evidence.search(norm) or evidence.search(with_digits(norm, language)))


_TEXT2NUM_LANGUAGES = frozenset({"pt", "es", "en", "fr", "de", "it", "nl"})


@lru_cache(maxsize=8192)
def with_digits(text: str, language: str) -> str:
    """`text` with the numbers it writes in words as figures ("cento e vinte dias" -> "120
    dias"), by `text2num`; unchanged in a language that library does not know."""
    if language not in _TEXT2NUM_LANGUAGES:
        return text
    try:
        return str(alpha2digit(text, language))
    except Exception:  # the parser must never cost the answer
        return text


# A figure, a deadline or a place: what an answer states and an introduction does not.
_SPECIFIC = re.compile(r"\d|@|>")
# Sentences about the page itself ("Esta página explica ...") answer nothing.
_META = re.compile(
    r"\b(?:esta|nesta|essa) (?:pagina|politica)\b|\bthis (?:page|policy)\b|"
    r"\b(?:esta|en esta) (?:pagina|politica)\b|\bpagina explica\b|\bduvidas\b|\bdudas\b|"
    r"\bconsultas:"
)

_OPENERS: dict[str, dict[str, str]] = {
    "pt": {
        "duration": "Sobre o prazo — {s}:",
        "amount": "Sobre o valor — {s}:",
        "condition": "Sobre quem tem direito — {s}:",
        "steps": "Sobre como fazer — {s}:",
        "": "Sobre {s}:",
    },
    "es": {
        "duration": "Sobre el plazo — {s}:",
        "amount": "Sobre el monto — {s}:",
        "condition": "Sobre quién tiene derecho — {s}:",
        "steps": "Sobre cómo hacerlo — {s}:",
        "": "Sobre {s}:",
    },
    "en": {
        "duration": "On the timing — {s}:",  # when, how long, how often
        "amount": "On the amount — {s}:",
        "condition": "On who is entitled — {s}:",
        "steps": "On how to do it — {s}:",
        "": "On {s}:",
    },
}
_FOUND: dict[str, str] = {
    "pt": "O que os documentos dizem:",
    "es": "Lo que dicen los documentos:",
    "en": "What the documents say:",
}

# Tuning, measured with `manage.py evaluate --answers` on ptes-dev and the demo tasks.
REFER_RATIO = 0.75  # a page the answering page sends the reader to, when it fits this well
TOP_LINES = 2  # a document's fit is the mean of its best lines
MAX_LINES = 4
LIST_ITEMS = 8  # items of a list that a chosen "... de:" line brings along
WORD_BUDGET = 55  # words of the chosen lines beyond the first (steps blocks excepted)
QUERY_WEIGHT = 0.6  # words only in the rewritten queries or glossary expansions
# Which group a searched word is in for the line model's features (own: 1.0; carried or
# expanded: QUERY_WEIGHT; carried and already said by the last reply: QUERY_WEIGHT *
# SAID_TERM); also the words' weights in the answer's coverage.
SAID_TERM = 0.3
TOPIC_ONLY_WORDS = 3  # a question of at most this many own words may only name its topic
REPEATED_SHARE = 0.6  # a line whose content words an earlier reply said this much of ...
REPEATED_WORDS = 4  # ... (a line of at least this many content words) has been read
# Below this share of the question's words (see `ExtractiveAnswer`) the pages don't say it.
NOT_FOUND_COVERAGE = 0.12  # calibrated: see docs/answers.md


@dataclass(frozen=True)
class _Line:
    passage: Passage
    rank: int  # the passage's place in the list, 0 first
    order: int  # the line's place in its passage
    text: str
    stems: frozenset[str]
    step: int | None = None  # the number of a numbered step
    block: int = -1  # numbered steps of one list share a block
    lead: int = -1  # a list item: the order of the line ending in ":" that introduces it
    joined: bool = False  # a sentence that goes on the previous line's paragraph
    table: int = -1  # rows of one table share a table
    title: frozenset[str] = frozenset()  # its page title's stems

    @cached_property
    def norm(self) -> str:
        """The line's text normalised (`normalize`), once: scoring reads it many times."""
        return normalize(self.text)


@dataclass(frozen=True)
class ChosenLine:
    """A line the answer quotes, and why: its score and what it was found for."""

    text: str
    number: int  # the source card it cites
    document: str
    heading: str
    score: float
    page_rank: int  # its document's place among the found ones, 0 first
    says: tuple[str, ...]  # the searched words (stems) the line or its heading says
    # The line model's features that weighed most for or against it, with what each added
    # to its linear score (largest first).
    features: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class ExtractiveAnswer:
    """The extractive answer's text, its lines with their scores, and how well it covers
    the question: the share of the searched words (weighted as the lines are scored:
    the question's own words most, and by rarity) that the chosen lines or their headings
    say. `not_found` when that share is below
    NOT_FOUND_COVERAGE: the pages found do not say what is asked."""

    text: str
    lines: tuple[ChosenLine, ...] = ()
    coverage: float = 0.0
    not_found: bool = False


_Key = tuple[int, int]  # a line's place: its passage's identity and its order there


def _key(line: _Line) -> _Key:
    return (id(line.passage), line.order)


@lru_cache(maxsize=4)
def _cue_stems(language: str) -> frozenset[str]:
    return frozenset(stem(w, language) for w in CUE_WORDS)


@lru_cache(maxsize=8192)
def _stems(text: str, language: str) -> frozenset[str]:
    """A line's stems; the pages a turn shows come back turn after turn, their lines with
    them, and splitting words was most of the cost of reading a line."""
    return frozenset(stem(t.text, language) for t in token_spans(text))


_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")


def _plain(text: str) -> str:
    """Markdown emphasis kept as the page shows it; images dropped (an answer line is text:
    "![VMware Solutions and Red Hat OpenShift](https://…svg)" took a bullet), whitespace
    collapsed."""
    return " ".join(_IMAGE.sub(" ", text).split())


# A line with no figure, address, link or closing punctuation.
_BARE_HEADING = re.compile(r"^[^\d@\[\]<>|*_`]*[^\d@\[\]<>|*_`.!?:;,)]$")
HEADING_WORDS = 8


def _row_text(header: Sequence[str], cells: Sequence[str]) -> str:
    """A table row as one line naming its columns ("Gerente — Limite: R$ 100; Prazo: 30 dias.")."""
    parts = [f"{h}: {c}" if h else c for h, c in zip(header[1:], cells[1:], strict=False) if c]
    return f"{cells[0]} — " + "; ".join(parts) + "."


def _lines(passage: Passage, rank: int, language: str) -> list[_Line]:
    """Split a passage into sentences, list items, table rows and numbered steps."""
    out: list[_Line] = []
    header: list[str] = []
    block = 0
    in_steps = False
    order = 0
    table = 0

    lead = -1  # the order of the last line that ends in ":", while its list goes on

    def add(
        text: str,
        step: int | None = None,
        item: bool = False,
        joined: bool = False,
        row: bool = False,
    ) -> None:
        nonlocal order, lead
        text = _plain(text)
        if len(text) < 12 and step is None and not item:
            return
        of = lead if item else -1
        out.append(
            _Line(
                passage,
                rank,
                order,
                text,
                _stems(text, language),
                step,
                block if step else -1,
                of,
                joined,
                table if row else -1,
                _stems(passage.title, language),
            )
        )
        if not item:
            lead = order if text.endswith(":") and step is None else -1
        order += 1

    for raw in passage.text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            in_steps = False
            continue
        if row := _ROW.match(line):
            if _RULE_ROW.match(line):
                continue
            cells = [c.strip() for c in row.group(1).split("|")]
            if not header:
                header = cells
                table += 1
                continue
            add(_row_text(header, cells), row=True)
            continue
        header = []
        if step := _STEP.match(line):
            if not in_steps:
                block += 1
                in_steps = True
            add(step.group(2), int(step.group(1)))
            continue
        in_steps = False
        item = _ITEM.match(line)
        if item and lead >= 0:
            add(item.group(1), item=True)  # a list item is one line, kept whole
            continue
        lead = -1
        if not item and _BARE_HEADING.match(line) and len(line.split()) <= HEADING_WORDS:
            # A heading written as a plain line ("Passing sensitive data", "Score
            # Agreement level"): it names a section and answers nothing.
            continue
        body = item.group(1) if item else line
        for i, sentence in enumerate(_SENTENCE.split(body)):
            add(sentence, joined=i > 0)
    return out


def _whole_sentences(lines: list[_Line]) -> list[_Line]:
    """A chunk after a document's first may open mid-sentence (chunks overlap at a word
    boundary, not a sentence's): that fragment goes when another passage holds the whole
    sentence, and otherwise shows that it is cut ("…é pago na rescisão")."""
    out: list[_Line] = []
    for line in lines:
        cut = line.order == 0 and line.passage.position > 0 and line.text[:1].islower()
        if not cut:
            out.append(line)
            continue
        tail = line.norm
        whole = any(
            other is not line and other.passage is not line.passage and other.norm.endswith(tail)
            for other in lines
        )
        if not whole:
            out.append(replace(line, text="…" + line.text))
    return out


def line_texts(passage: Passage, language: str) -> list[str]:
    """The texts of the candidate lines the answer scores for this passage, in order.

    Ingestion embeds exactly these (one vector each, `Passage.line_vectors` at answer
    time). `_whole_sentences` is the one step that looks across passages: a chunk's cut
    opening fragment is dropped when another found passage holds its whole sentence, and
    shown as "…fragment" otherwise. Split alone, the passage keeps that line as
    "…fragment": the answer's line is then either that very text or no line at all, so
    every line the answer scores has its stored vector.
    """
    return [line.text for line in _whole_sentences(_lines(passage, 0, language))]


def line_similarity(
    line_text: str, passage: Passage, query_vectors: Mapping[str, Sequence[float]]
) -> float | None:
    """The line's best cosine similarity with the turn's searched queries (their vectors by
    query text: `RetrievalOutcome.query_vectors`); None when the passage has no stored vector
    for the line or there are no query vectors.

    Both sides are unit vectors (the search layer normalises them), so the cosine is a dot
    product. A passage's lines are compared with the queries at once, on the first of its
    lines asked (numpy: about 0.3 ms for 80 lines and 3 queries, 2 % of the pure-Python
    loop's), then each line is a lookup.
    """
    index = passage.line_index.get(line_text) if passage.line_vectors else None
    if index is None or not query_vectors:
        return None
    queries = (
        query_vectors if isinstance(query_vectors, QueryVectors) else QueryVectors(query_vectors)
    )
    return float(_similarities(passage, queries)[index])


# A turn reads at most 36 passages (6 documents, 6 chunks each); the cache keeps their
# vectors alive (about 12 kB a line as Python floats), so it holds little more than a turn's.
@lru_cache(maxsize=48)
def _similarities(passage: Passage, queries: QueryVectors) -> npt.NDArray[np.float32]:
    """Each stored line's best cosine with the queries (a turn's passages, while it lasts)."""
    lines = np.array([vector for _, vector in passage.line_vectors], dtype=np.float32)
    best: npt.NDArray[np.float32] = (lines @ _query_matrix(queries).T).max(axis=1)
    return best


@lru_cache(maxsize=16)
def _query_matrix(queries: QueryVectors) -> npt.NDArray[np.float32]:
    return np.array(list(queries.values()), dtype=np.float32)


def _question_terms(
    question: str, queries: Sequence[str], rewrite: RewriteResult | None, language: str
) -> dict[str, float]:
    """Stems to look for, with their weight: the question's own count most."""
    terms: dict[str, float] = {}
    stop = stopwords_for(language)
    # An opening "mudando de assunto," names no topic: its words would make any line that
    # says "assunto" answer.
    for token in _topic_tokens(after_switch_announcement(question)):
        if is_content_word(token.norm, stop):
            terms[stem(token.text, language)] = 1.0
    extra = list(queries)
    if rewrite is not None:
        extra += [h.expansion for h in rewrite.glossary_hits]
        extra += list(rewrite.corrections.values())
    for text in extra:
        for token in _topic_tokens(after_switch_announcement(text)):
            if token.norm in stop or len(token.norm) < 2:
                continue
            terms.setdefault(stem(token.text, language), QUERY_WEIGHT)
    return terms


# "por ano", "al mes", "per day", "a cada semana": a rate, not a topic. Not "a" alone: in
# Portuguese it is the article ("a hora extra").
_RATE_WORDS = frozenset({"por", "al", "per", "cada", "every", "each"})
_PERIODS = frozenset(
    normalize(
        "ano anos mes meses dia dias semana semanas hora horas año años día días "
        "year years month months day days week weeks hour hours"
    ).split()
)


def _topic_tokens(text: str) -> list[Token]:
    """The words of `text` that may name what it is about: not the "vezes" of "quantas
    vezes" nor a rate's period ("por ano", "por mês"), which would make any line saying "uma
    vez por ano" answer (a how-often follow-up after one benefit got another benefit's
    lines)."""
    tokens = token_spans(text)
    return [
        t
        for i, t in enumerate(tokens)
        if t.norm not in COUNTING_WORDS and not _rate_period(tokens, i)
    ]


def _rate_period(tokens: Sequence[Token], i: int) -> bool:
    return tokens[i].norm in _PERIODS and i > 0 and tokens[i - 1].norm in _RATE_WORDS


def _idf(
    lines: Sequence[_Line], df: Mapping[str, int] | None, n_chunks: int, language: str
) -> dict[str, float]:
    """Rarity of each stem: from the corpus when given, else over the passages' lines."""
    if df is not None and n_chunks > 0:
        by_stem: Counter[str] = Counter()
        for word, count in df.items():
            root = stem(word, language)
            by_stem[root] = max(by_stem[root], count)
        return {s: math.log((n_chunks + 1) / (c + 0.5)) for s, c in by_stem.items() if c} | {
            "__default__": math.log(n_chunks + 1)
        }
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(line.stems)
    n = len(lines)
    return {s: math.log((n + 1) / (c + 0.5)) for s, c in counts.items()} | {
        "__default__": math.log(n + 1)
    }


def _line_features(
    line: _Line,
    terms: Mapping[str, float],
    idf: Mapping[str, float],
    kind: AnswerKind | None,
    heading_stems: frozenset[str],
    *,
    topic_only: bool = False,
    repeated: bool = False,
) -> dict[str, float]:
    """What the line scorer weighs (`line_model.FEATURES` says what each is); the relative
    features are added over all the answer's lines by `_scores`."""
    default = idf["__default__"]
    totals = {"own": 0.0, "carried": 0.0, "echo": 0.0}
    in_line = dict(totals)
    in_heading = dict(totals)
    in_title = dict(totals)
    mass = 0.0
    for root, weight in terms.items():
        w = max(0.0, idf.get(root, default))
        group = "own" if weight >= 1.0 else "carried" if weight >= QUERY_WEIGHT else "echo"
        totals[group] += w
        if root in line.stems:
            in_line[group] += w
            mass += weight * w
        elif root in line.title:
            in_title[group] += w
        elif root in heading_stems:
            in_heading[group] += w  # the section's own heading, not its page's title

    def share(part: float, whole: float) -> float:
        return part / whole if whole else 0.0

    said = any(in_line.values())
    norm = line.norm
    stated = kind is not None and _states(kind, norm, line.passage.language)
    figure = kind is None and bool(_SPECIFIC.search(norm))
    words = max(1, len(line.text.split()))
    return {
        "own_line": share(in_line["own"], totals["own"]),
        "own_title": share(in_title["own"], totals["own"]),
        "own_heading": share(in_heading["own"], totals["own"]),
        "carried_line": share(in_line["carried"], totals["carried"]),
        "carried_title": share(in_title["carried"], totals["carried"]),
        "carried_heading": share(in_heading["carried"], totals["carried"]),
        "echo_line": share(in_line["echo"], totals["echo"]),
        "said_mass": math.log1p(mass),
        "silent": float(not said),
        "kind_stated": float(stated),
        "kind_missing": float(kind is not None and not stated),
        "figure": float(figure),
        "figure_topic_only": float(figure and topic_only),
        "meta": float(bool(_META.search(norm))),
        "emphasis": float(bool(_EMPHASIS.search(line.text))),
        "page_rank": float(min(line.rank, 4)),
        "line_order": min(line.order, 10) / 10,
        "later_chunk": float(line.passage.position > 0),
        "log_words": math.log(words),
        "step": float(line.step is not None),
        "item": float(line.lead >= 0),
        "row": float(line.table >= 0),
        "repeated": float(repeated),
    }


def _add_semantic(
    lines: Sequence[_Line], rows: Sequence[dict[str, float]], vectors: Mapping[str, Sequence[float]]
) -> set[int]:
    """Each line's `semantic` (its best cosine with the searched queries) and `semantic_gap`
    (how far below the answer's best line's it is). A line without a stored vector (none
    from before the line vectors, or past a chunk's limit) counts as the answer's mean, so
    that it is neither lifted nor sunk by what was not measured. Returns the identities of
    the lines measured."""
    if not vectors:
        return set()
    found = [line_similarity(line.text, line.passage, vectors) for line in lines]
    known = [value for value in found if value is not None]
    if not known:
        return set()
    mean = sum(known) / len(known)
    best = max(known)
    for row, value in zip(rows, found, strict=True):
        row["semantic"] = mean if value is None else value
        row["semantic_gap"] = best - row["semantic"]
    return {id(line) for line, value in zip(lines, found, strict=True) if value is not None}


def _relevant(line: _Line, terms: Mapping[str, float], heading_stems: frozenset[str]) -> bool:
    """Whether the line, its title or its section heading says any searched word: a line of
    a page that says none is no candidate at all (score 0)."""
    return any(root in line.stems or root in heading_stems or root in line.title for root in terms)


def _scores(
    lines: Sequence[_Line],
    terms: Mapping[str, float],
    idf: Mapping[str, float],
    kind: AnswerKind | None,
    context: Mapping[int, frozenset[str]],
    *,
    topic_only: bool = False,
    repeated: Set[int] = frozenset(),
    cases: Mapping[str, frozenset[str]] | None = None,
    reasons: dict[int, Mapping[str, float]] | None = None,
    vectors: Mapping[str, Sequence[float]] | None = None,
    language: str | None = None,
) -> dict[int, float]:
    """Every line's score for one question (in `language`), by the line's identity: the
    line model's score (0 for a line no searched word leads to, on a page in the question's
    language). `reasons`, when given, receives each scored
    line's feature contributions (`LineModel.contributions`). `vectors`: the searched
    queries' vectors, which with the passages' stored line vectors give `semantic`."""
    rows = [
        _line_features(
            line,
            terms,
            idf,
            kind,
            context[id(line.passage)],
            topic_only=topic_only,
            repeated=id(line) in repeated,
        )
        for line in lines
    ]
    # A line about another case than the one the question names (the other parent, another
    # country, abroad for home) is no candidate while a line that is not answers.
    other = {id(line) for line in lines if cases and _other_case(line, cases)}
    best_own = max((r["own_line"] for r in rows), default=0.0) or 1.0
    measured = _add_semantic(lines, rows, vectors or {})
    model = line_model()
    out: dict[int, float] = {}
    relevant_of: dict[int, bool] = {}
    for line, row in zip(lines, rows, strict=True):
        row["relative_own"] = row["own_line"] / best_own
        relevant = _relevant(line, terms, context[id(line.passage)]) or (
            # A page in another language than the question shares no words with it: its
            # lines are weighed by their meaning (an English question over Portuguese pages).
            id(line) in measured and line.passage.language not in ("", language or "")
        )
        relevant_of[id(line)] = relevant
        out[id(line)] = model.score(row) if relevant else 0.0
        if reasons is not None and relevant:
            reasons[id(line)] = model.contributions(row)
    if other and any(out[id(line)] > 0 for line in lines if id(line) not in other):
        out.update(dict.fromkeys(other, 0.0))
    sink = recorder()
    if sink is not None:
        sink(
            [
                {
                    "text": line.text,
                    "document": _document(line.passage),
                    "rank": line.rank,
                    "relevant": relevant_of[id(line)],
                    "score": out[id(line)],
                    "features": row,
                }
                for line, row in zip(lines, rows, strict=True)
            ]
        )
    return out


SUBJECT_CHARS = 80  # the longest subject an opening line repeats


def _subject(question: str, language: str, kind: AnswerKind | None) -> str:
    """The person's own words, trimmed of cue words and small words at both ends (and of
    an opening "mudando de assunto,")."""
    question = _without_personal_data(after_switch_announcement(question))
    tokens = token_spans(question)
    stop = stopwords_for(language)
    keep = [
        i
        for i, t in enumerate(tokens)
        if t.norm not in stop
        and t.norm not in CUE_WORDS
        and len(t.norm) > 1
        and not _rate_period(tokens, i)  # the period of a "how many times per year" question
    ]
    if not keep:
        return ""
    # A long question's subject ends at its last kept word within SUBJECT_CHARS, never
    # inside a word ("... para quem está em t:").
    first = tokens[keep[0]]
    end = max(
        (tokens[i].end for i in keep if tokens[i].end - first.start <= SUBJECT_CHARS),
        default=first.end,
    )
    return question[first.start : end].strip()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_CLAUSE = re.compile(r"[^,;]+[,;]*")


def _first_placeholder(text: str) -> int | None:
    """Where the first masking placeholder of `text` starts, or None."""
    return next((t.start for t in token_spans(text) if is_placeholder(t.text)), None)


def _without_personal_data(question: str) -> str:
    """The question without what holds personal data ("soy [NAME_1], CI [CI_1]. ¿cuánto
    me toca de aguinaldo?"): the opening line repeats the person's question, not their
    name, number or salary. The sentence that asks is kept, less its clauses that hold a
    placeholder; when none is left, it is cut at its first placeholder ("si gano
    [MONEY_1]" -> "si gano")."""
    if _first_placeholder(question) is None:
        return question
    sentences = [s for s in _SENTENCE_END.split(question) if s.strip()]
    asked = next((s for s in reversed(sentences) if "?" in s), sentences[-1])
    clauses = [m.group() for m in _CLAUSE.finditer(asked)]
    kept = "".join(c for c in clauses if _first_placeholder(c) is None).strip()
    if any(len(t.norm) > 2 for t in token_spans(kept)):
        return kept
    found = _first_placeholder(asked)
    return asked[:found] if found is not None else asked


def opening_line(
    question: str, language: str, kind: AnswerKind | None, title: str, subject: str | None = None
) -> str:
    """One short line that replies to the person's words, in the turn's language."""
    lang = language if language in _OPENERS else "pt"
    if subject is None:
        subject = _subject(question, lang, kind)
    if len(subject.split()) < 2:
        # A short follow-up ("e pros estagiários?"): name the document it was answered from.
        head = title_subject(title)
        subject = f"{subject} ({head})" if subject and head else subject or head
    if not subject:
        return _FOUND[lang]
    return _OPENERS[lang][kind or ""].format(s=subject)


def extractive_answer(
    *,
    question: str,
    queries: Sequence[str],
    passages: Sequence[Passage],
    language: str,
    rewrite: RewriteResult | None = None,
    df: Mapping[str, int] | None = None,
    n_chunks: int = 0,
    rankings: Mapping[str, Sequence[str]] | None = None,
    history: Sequence[HistoryMessage] = (),
    lead: str | None = None,
    query_vectors: Mapping[str, Sequence[float]] | None = None,
) -> str:
    """The extractive answer's text (`extractive_choice` has its lines and scores)."""
    return extractive_choice(
        question=question,
        queries=queries,
        passages=passages,
        language=language,
        rewrite=rewrite,
        df=df,
        n_chunks=n_chunks,
        rankings=rankings,
        history=history,
        lead=lead,
        query_vectors=query_vectors,
    ).text


def extractive_choice(
    *,
    question: str,
    queries: Sequence[str],
    passages: Sequence[Passage],
    language: str,
    rewrite: RewriteResult | None = None,
    df: Mapping[str, int] | None = None,
    n_chunks: int = 0,
    rankings: Mapping[str, Sequence[str]] | None = None,
    history: Sequence[HistoryMessage] = (),
    lead: str | None = None,
    query_vectors: Mapping[str, Sequence[float]] | None = None,
) -> ExtractiveAnswer:
    """Answer with the passages' own lines that answer the question (see the module doc).

    `df`/`n_chunks` are the collection's document frequencies (a `LexiconView`'s); without
    them rarity is measured over the passages themselves. `rankings` holds, per searched
    query's text, the documents in that query's own order (`query_rankings`): each part of
    a split message trusts its own search, not the fused one. `history` is the masked
    window (its last reply's words find what the reply said). `lead` is a document the
    search put first on purpose (a version, a country or company terms the turn named): it
    answers. `query_vectors` are the searched queries' unit vectors by text
    (`RetrievalOutcome.query_vectors`): with the passages' stored line vectors they give a
    line's semantic similarity to the question (`line_similarity`), embedding nothing.
    """
    if not passages:
        return ExtractiveAnswer(label("nothing", language), not_found=True)
    language = language if language in _OPENERS else (detect_language(question) or "pt")
    order: dict[str, int] = {}
    for p in passages:
        order.setdefault(_document(p), len(order))
    lines = _whole_sentences(
        [line for p in passages for line in _lines(p, order[_document(p)], language)]
    )
    if not lines:
        first = passages[0]
        return ExtractiveAnswer(
            f"{_FOUND[language]}\n\n{_plain(first.text)[:400]} [{first.number}]"
        )
    idf = _idf(lines, df, n_chunks, language)
    context = {id(p): _stems(p.heading, language) | _stems(p.title, language) for p in passages}
    question_at = _Question(question, queries, rewrite, language, history, query_vectors or {})
    parts = _sub_questions(question, rewrite)
    judged = _same_language(passages, language)
    if len(parts) >= 2:
        # Two questions in one message: each answered from its own document.
        shown = _spelled(question, rewrite, lines)  # the opening line repeats it
        reasons: dict[int, Mapping[str, float]] = {}
        chosen = _answer_parts(
            parts,
            lines,
            passages,
            order,
            rankings or {},
            idf,
            context,
            language,
            reasons,
            query_vectors,
        )
        subject = _joined_subjects(shown, language, len(parts))
        text = _render(shown, language, None, chosen, subject=subject)
        terms = _question_terms(question, queries, rewrite, language)
        return _explained(text, chosen, terms, idf, context, judged=judged, reasons=reasons)
    return _answer_one(
        question_at, lines, passages, idf, context, lead if lead in order else None, judged
    )


@dataclass(frozen=True)
class _Question:
    """One question as the extractive answer reads it: its words, the searched queries, the
    rewrite that made them, its language and the conversation window before it."""

    text: str
    queries: Sequence[str]
    rewrite: RewriteResult | None
    language: str
    history: Sequence[HistoryMessage]
    # The searched queries' unit vectors by text, for `line_similarity`.
    vectors: Mapping[str, Sequence[float]] = field(default_factory=dict)


def _answer_one(
    question: _Question,
    lines: Sequence[_Line],
    passages: Sequence[Passage],
    idf: Mapping[str, float],
    context: Mapping[int, frozenset[str]],
    lead: str | None,
    judged: bool,
) -> ExtractiveAnswer:
    """The answer to a message that asks one thing: its lines, chosen by `_choose`."""
    language, rewrite = question.language, question.rewrite
    reasons: dict[int, Mapping[str, float]] = {}
    kind = answer_kind(question.text)
    terms = _question_terms(question.text, question.queries, rewrite, language)
    said = _said_only(question.history, language)
    if said:
        # Words the rewrite carried from the last reply (the user never wrote them) find
        # what that reply said again, not the line that answers what is asked now.
        terms = {t: (w * SAID_TERM if w < 1.0 and t in said else w) for t, w in terms.items()}
    chosen = _choose(
        lines,
        passages,
        terms,
        idf,
        kind,
        context,
        lead=lead,
        language=language,
        repeated=_repeated(lines, question.history, language),
        topic_only=_names_only_its_topic(terms, context[id(passages[0])], rewrite, language),
        cases=_cases(" ".join([question.text, *question.queries])),
        reasons=reasons,
        vectors=question.vectors,
    )
    shown = _spelled(question.text, rewrite, lines)  # the opening line repeats it
    text = _render(shown, language, kind, chosen)
    return _explained(text, chosen, terms, idf, context, judged=judged, reasons=reasons)


def _same_language(passages: Sequence[Passage], language: str) -> bool:
    """Whether the question's words can be looked for on these pages: a page in its
    language (or of no known language) is among them. An English question over
    Portuguese pages shares few words with the line that answers it, so its coverage
    says nothing about whether the pages hold the answer."""
    return any(p.language in ("", language) for p in passages)


def _explained(
    text: str,
    chosen: Sequence[tuple[float, _Line]],
    terms: Mapping[str, float],
    idf: Mapping[str, float],
    context: Mapping[int, frozenset[str]],
    *,
    judged: bool = True,
    reasons: Mapping[int, Mapping[str, float]] | None = None,
) -> ExtractiveAnswer:
    """The answer with its lines, and the share of the question it covers (see
    `ExtractiveAnswer`): every searched word, by its weight (the person's own words count
    most) and its rarity. Unless `judged`, the coverage is kept but never says "not
    found" (`_same_language`). `reasons`: each scored line's feature contributions, of
    which a chosen line keeps its largest (`WHY_FEATURES`)."""
    own = dict(terms)
    default = idf["__default__"]
    weight = {t: w * max(0.0, idf.get(t, default)) for t, w in own.items()}
    said: set[str] = set()
    lines = []
    for score, line in chosen:
        says = {t for t in own if t in line.stems or t in context[id(line.passage)]}
        said |= says
        lines.append(
            ChosenLine(
                text=line.text,
                number=line.passage.number,
                document=_document(line.passage),
                heading=line.passage.heading,
                score=round(score, 4),
                page_rank=line.rank,
                says=tuple(sorted(says)),
                features=_strongest((reasons or {}).get(id(line), {})),
            )
        )
    total = sum(weight.values())
    coverage = sum(weight[t] for t in said) / total if total else 0.0
    return ExtractiveAnswer(
        text,
        tuple(lines),
        coverage=round(coverage, 4),
        not_found=judged and coverage < NOT_FOUND_COVERAGE,
    )


WHY_FEATURES = 4  # the features a chosen line's "why" names


def _strongest(contributions: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    ranked = sorted(contributions.items(), key=lambda kv: -abs(kv[1]))[:WHY_FEATURES]
    return tuple((name, round(value, 2)) for name, value in ranked if round(value, 2))


def _spelled(question: str, rewrite: RewriteResult | None, lines: Sequence[_Line]) -> str:
    """The question with the rewrite's spelling fixes, each as the documents write it
    ("estagiaro" -> "estagiário", "reenbolso" -> "reembolso"): the opening line repeats the
    person's words, not their typos. Only a one-letter slip is fixed there ("perdio" ->
    "perdida", "terceirizados" -> "terceirizada" change the word, not its spelling), and
    only as the shown lines write it (the vocabulary's words carry no accents)."""
    fixes = rewrite.corrections if rewrite is not None else {}
    slips: list[tuple[Token, str]] = []  # each slip and how the vocabulary writes its fix
    for token in token_spans(question):
        fix = normalize(fixes.get(token.norm, ""))
        if fix and edit_distance(token.norm, fix) <= 1:
            slips.append((token, fix))
    if not slips:
        return question
    written: dict[str, str] = {}
    for line in lines:
        for word in token_spans(line.text):
            written.setdefault(word.norm, word.text)
    out = question
    for token, key in reversed(slips):
        surface = written.get(key)
        if surface is not None:
            surface = surface.lower() if token.text.islower() else surface
            out = out[: token.start] + surface + out[token.end :]
    return out


def _names_only_its_topic(
    terms: Mapping[str, float],
    named: frozenset[str],
    rewrite: RewriteResult | None,
    language: str,
) -> bool:
    """Whether the question only names its topic ("regra do VR no home", "como funciona o
    banco de horas?"): a few words of its own, each in `named` (the top passage's title
    and heading stems), or a glossary term whose expansion is. Such a question wants the
    page's figures (the daily value, the deadline), which share none of its words."""
    own = _own_terms(terms)
    if not 0 < len(own) <= TOPIC_ONLY_WORDS:
        return False
    glossed: set[str] = set()
    for hit in rewrite.glossary_hits if rewrite is not None else ():
        if _stems(hit.expansion, language) & named:
            glossed |= _stems(hit.term, language)
    return all(t in named or t in glossed for t in own)


def _repeated(
    lines: Sequence[_Line], history: Sequence[HistoryMessage], language: str
) -> frozenset[int]:
    """The lines (by identity) whose words an earlier reply of the window mostly said, and
    whose amounts, if any, a reply stated."""
    said = [m.text for m in history if m.role == "assistant"]
    if not said:
        return frozenset()
    replies = [_content_stems(text, language) for text in said]
    # A line with an amount no reply stated says something new in the words the reply
    # used: the dental plan's "Dependente — R$ 24,90; desconto em folha" after a reply on
    # the health plan's 50% for each dependent, "descontado em folha".
    amounts = frozenset().union(*(_amounts(text) for text in said))
    out: set[int] = set()
    for line in lines:
        mine = _content_stems(line.text, language)
        if (
            len(mine) >= REPEATED_WORDS
            and _amounts(line.text) <= amounts
            and any(len(mine & reply) >= REPEATED_SHARE * len(mine) for reply in replies)
        ):
            out.add(id(line))
    return frozenset(out)


_AMOUNT = re.compile(
    r"(?:r\$|us\$|\$u|€|\$)\s*\d(?:[\d.,]*\d)?"
    r"|\d(?:[\d.,]*\d)?\s*(?:%|€|(?:reais|euros|pesos|dolares|dollars)\b)"
)


def _amounts(text: str) -> frozenset[str]:
    """The amounts `text` states ("r$ 24,90", "50%", "55 €"), normalised."""
    return frozenset(" ".join(m.split()) for m in _AMOUNT.findall(normalize(text)))


@lru_cache(maxsize=4096)
def _content_stems(text: str, language: str) -> frozenset[str]:
    stop = stopwords_for(language)
    return frozenset(
        stem(t.text, language) for t in token_spans(text) if is_content_word(t.norm, stop)
    )


def _said_only(history: Sequence[HistoryMessage], language: str) -> frozenset[str]:
    """The content stems of the conversation's last reply that no user turn has."""
    reply = next((m.text for m in reversed(history) if m.role == "assistant"), "")
    if not reply:
        return frozenset()
    asked = frozenset().union(
        *(_content_stems(m.text, language) for m in history if m.role == "user")
    )
    return _content_stems(reply, language) - asked


@dataclass(frozen=True)
class _Part:
    """One question of a split message, read in its own search's order."""

    lines: list[_Line]  # ranked as the part's own search ranked their documents
    terms: dict[str, float]
    kind: AnswerKind | None
    lead: str  # the document its own search ranked first
    scores: dict[int, float]  # each of `lines`' score for this part, by the line's identity
    fit: dict[_Key, float]  # each line's score as a share of the part's best, by its place


def _answer_parts(
    parts: Sequence[str],
    lines: list[_Line],
    passages: Sequence[Passage],
    order: dict[str, int],
    rankings: Mapping[str, Sequence[str]],
    idf: Mapping[str, float],
    context: Mapping[int, frozenset[str]],
    language: str,
    reasons: dict[int, Mapping[str, float]] | None = None,
    vectors: Mapping[str, Sequence[float]] | None = None,
) -> list[tuple[float, _Line]]:
    """The lines that answer each question of a split message, two each, in turn (each
    scored line's feature contributions into `reasons`; `vectors` the searched queries')."""
    asked: list[_Part] = []
    for text in parts:
        own = _part_order(order, rankings.get(text, ()))
        part_lines = lines if own == order else _reranked(lines, own)
        terms = _question_terms(text, [], None, language)
        kind = answer_kind(text)
        scores = _scores(
            part_lines,
            terms,
            idf,
            kind,
            context,
            cases=_cases(text),
            reasons=reasons,
            vectors=vectors,
            language=language,
        )
        fit = _relative_fit(scores, part_lines)
        lead = min(own, key=own.__getitem__)
        asked.append(_Part(part_lines, terms, kind, lead, scores, fit))
    chosen: list[tuple[float, _Line]] = []
    leads: set[str] = set()
    for index, part in enumerate(asked):
        # A line that a later part fits better is left to it ("indemnización despido
        # objetivo y se mantiene el seguro médico?": the line on keeping the insurance after
        # a dismissal answers the second question, not the first).
        later = [other.fit for other in asked[index + 1 :]]
        mine = [line for line in part.lines if not _claimed(line, part.fit, later)]
        if not any(part.scores[id(line)] > 0 for line in mine):
            mine = part.lines  # nothing of its own is left: it shares
        found = _choose(
            mine,
            passages,
            part.terms,
            idf,
            part.kind,
            context,
            limit=2,
            lead=part.lead,
            language=language,
            scores=part.scores,
            # A later question whose own search ranks first the page an earlier one answers
            # from asks about another topic: that page may yield to one that says the words
            # it lacks.
            firm_lead=part.lead not in leads,
            cases=_cases(text),
        )
        leads.add(part.lead)
        # Two chunks of one document may repeat a line: it is said once.
        have = {line.norm for _, line in chosen}
        chosen += [item for item in found if item[1].norm not in have]
    return chosen


def _relative_fit(scores: Mapping[int, float], lines: Sequence[_Line]) -> dict[_Key, float]:
    """Each line's score for one question, as a share of that question's best line."""
    best = max(scores.values(), default=0.0) or 1.0
    return {_key(line): scores[id(line)] / best for line in lines}


def _claimed(
    line: _Line, fits: Mapping[_Key, float], others: Sequence[Mapping[_Key, float]]
) -> bool:
    """Whether another question of the message fits `line` better than this one does, and
    well enough to answer with it (at least the line model's `keep` of its best line)."""
    key = _key(line)
    keep = line_model().keep
    return any(other.get(key, 0.0) > max(keep, fits.get(key, 0.0)) for other in others)


def _part_order(order: Mapping[str, int], ranking: Sequence[str]) -> dict[str, int]:
    """The shown documents in one part's own search order; those it did not find follow."""
    own = [d for d in ranking if d in order]
    rest = sorted((d for d in order if d not in own), key=lambda d: order[d])
    return {d: i for i, d in enumerate(own + rest)}


def _reranked(lines: Sequence[_Line], order: Mapping[str, int]) -> list[_Line]:
    return [replace(line, rank=order[_document(line.passage)]) for line in lines]


def _sub_questions(question: str, rewrite: RewriteResult | None) -> list[str]:
    """The parts of a two-topic message, as the rewrite split it ("decompose" queries)."""
    if rewrite is None:
        return []
    return [q.text for q in rewrite.queries if q.type == "decompose"][:3]


_PART_END = re.compile(r"[?!.;:]+(?:\s+|$)")
_PART_JOIN = re.compile(
    r",?\s+(?:e|y|and)\s+(?=(?:como|cómo|quanto|quanta|cuánto|cuanto|qual|cuál|cual|quando|"
    r"cuándo|cuando|onde|dónde|donde|se|si|if|how|what|when|where)\b)",
    re.IGNORECASE,
)
SUBJECT_WORDS = 6  # words of each part's subject in a two-question opening line


def _own_parts(question: str) -> list[str]:
    """The person's own questions in one message: its sentences, else its "e como …" halves."""
    pieces = [(m.group(0), m.end()) for m in re.finditer(r"[^?!.;:]+[?!.;:]*", question)]
    asked = [text for text, _ in pieces if "?" in text]
    parts = asked if len(asked) >= 2 else [text for text, _ in pieces]
    if len(parts) < 2:
        parts = _PART_JOIN.split(question)
    return [_PART_END.sub(" ", p).strip() for p in parts if p.strip()]


def _joined_subjects(question: str, language: str, count: int) -> str:
    """ "A e B" from the person's own words, each part's subject cut at a whole word."""
    stop = stopwords_for(language)
    subjects: list[str] = []
    for part in _own_parts(question):
        words = _subject(part, language, None).split()
        if len(words) > SUBJECT_WORDS:
            words = words[:SUBJECT_WORDS]
            while words and normalize(words[-1]).strip(",") in stop:
                words.pop()
        subject = " ".join(words).strip(" ,")
        if subject and subject not in subjects:
            subjects.append(subject)
    subjects = subjects[-max(count, 2) :]
    if len(subjects) < 2:
        return _subject(question, language, None)
    joiner = {"es": " y ", "en": " and "}.get(language, " e ")
    return ", ".join(subjects[:-1]) + joiner + subjects[-1]


@lru_cache(maxsize=4096)
def _cases(text: str) -> Mapping[str, frozenset[str]]:
    """The countries, parent and scope a text is about (`cases_in`); a line's are asked for
    by every part of a message and every turn that shows its passage."""
    return cases_in(token_spans(text))


def _other_case(line: _Line, cases: Mapping[str, frozenset[str]]) -> bool:
    """Whether a line is about another case than the question's only: another country,
    the other parent, abroad for home."""
    mine = _cases(line.text)
    return any(slot in mine and not mine[slot] & values for slot, values in cases.items())


def _scored_or_first(
    every: Sequence[tuple[float, _Line]], lines: Sequence[_Line]
) -> list[tuple[float, _Line]]:
    """The lines that say any of the question's words, with their scores. When none does (a
    message of names only, masked), the best-ranked document that has lines speaks; the top
    passage may have none (a heading alone), and a part of a split message may have no lines
    at all ([])."""
    scored = [(s, line) for s, line in every if s > 0]
    if scored or not lines:
        return scored
    first = min(line.rank for line in lines)
    top = [line for line in lines if line.rank == first][:2]
    return [(1.0 - 0.01 * i, line) for i, line in enumerate(top)]


@dataclass(frozen=True)
class _Contest:
    """What the documents of one question's lines are weighed by (`_primary_document`)."""

    lines: Sequence[_Line]
    passages: Sequence[Passage]
    terms: Mapping[str, float]
    language: str
    every: Sequence[tuple[float, _Line]]  # every line with its score, zero included
    by_document: Mapping[str, list[tuple[float, _Line]]]  # the scored lines by document
    speaks: Mapping[str, bool]  # whether each document is in the question's language
    unsaid: Callable[[str], set[str]]  # the question's own words a document never says


def _primary_document(contest: _Contest, *, lead: str | None, firm_lead: bool) -> str:
    """The document that answers: the top passage's (or `lead`'s), unless another clearly
    answers better or the answering page sends the reader to another shown one."""
    by_document, speaks, terms = contest.by_document, contest.speaks, contest.terms
    primary = lead or _document(contest.passages[0])
    fit = _document_fit(by_document)
    challenger = max(fit, key=lambda d: fit[d])
    if lead is not None and not firm_lead and primary in fit and challenger != primary:
        # A part's own search may rank first a page that lacks some of its words ("se hora
        # de voo em viagem conta como extra" ranked the hours bank, which never says "voo"
        # nor "viagem"): a page that says all of them may answer it instead.
        lacks = contest.unsaid(primary)
        if (
            lacks
            and not lacks & contest.unsaid(challenger)
            and speaks[challenger] >= speaks[primary]
        ):
            return challenger
    # One part of a split message keeps the document its own search ranked first. Another
    # document leads only when it says one of the person's own words at least: the words
    # the rewrite carried from the conversation ranked the documents already ("quanto sai
    # por mês pra mim?" after including a spouse: the maintenance page says "incluiu" and
    # "plano" more often, and nothing of what is asked now).
    if primary not in fit or (
        lead is None
        and fit[challenger] > line_model().switch * fit[primary]
        and speaks[challenger] >= speaks[primary]
        and _says_own_words(by_document[challenger], terms)
    ):
        primary = challenger
    # The answering page sends the reader to another shown page for what is asked ("as
    # regras de perda estão em política específica"): that page answers when it fits
    # nearly as well and says a word of the question itself.
    own = _own_terms(terms)
    line_scores = {id(line): s for s, line in contest.every}
    target = _referred(contest.lines, primary, contest.language, line_scores, own)
    if (
        target is not None
        and target in fit
        and fit[target] >= REFER_RATIO * fit[primary]
        and speaks[target] >= speaks[primary]
        and _says_own_words(by_document[target], terms)
    ):
        primary = target
    return primary


def _with_other_topics(
    chosen: list[tuple[float, _Line]],
    by_document: Mapping[str, list[tuple[float, _Line]]],
    primary: str,
    speaks: Mapping[str, bool],
    missing: set[str],
    limit: int,
) -> list[tuple[float, _Line]]:
    """Another document adds lines only for question words the first one lacks (`missing`):
    a second topic, not a sibling's version of the same rule."""
    best_of = {d: max(s for s, _ in items) for d, items in by_document.items()}
    best_score = max(best_of.values())
    for document, items in sorted(by_document.items(), key=lambda kv: -best_of[kv[0]]):
        if document == primary or not missing or len(chosen) >= limit:
            continue
        if speaks[primary] and not speaks[document]:
            continue
        useful = [(s, line) for s, line in items if line.stems & missing]
        if not useful:
            continue
        extra = _pick(useful, best_score, limit=2)
        chosen = chosen + extra
        missing = missing - {st for _, line in extra for st in line.stems}
    return chosen


def _choose(
    lines: Sequence[_Line],
    passages: Sequence[Passage],
    terms: Mapping[str, float],
    idf: Mapping[str, float],
    kind: AnswerKind | None,
    context: Mapping[int, frozenset[str]],
    limit: int = MAX_LINES,
    lead: str | None = None,
    language: str = "pt",
    repeated: frozenset[int] = frozenset(),
    topic_only: bool = False,
    firm_lead: bool = True,
    scores: Mapping[int, float] | None = None,
    cases: Mapping[str, frozenset[str]] | None = None,
    reasons: dict[int, Mapping[str, float]] | None = None,
    vectors: Mapping[str, Sequence[float]] | None = None,
) -> list[tuple[float, _Line]]:
    """The lines that answer one question: its document's best, another topic's if asked.

    `lead` is the document the question's own search ranked first (default: the top
    passage's); unless `firm_lead`, it yields to a document that says the question's own
    words it lacks (one part of a split message); `repeated` lines, which an earlier reply
    said, are marked for the line model (a follow-up asks for something new).
    `topic_only`: the question only names its topic (its figures are what it asks).
    `scores` are the lines' scores already computed with these terms (by the line's
    identity). A line about another of the `cases` the
    question names (`_other_case`) is no candidate while another line answers."""
    if scores is None:
        scores = _scores(
            lines,
            terms,
            idf,
            kind,
            context,
            topic_only=topic_only,
            repeated=repeated,
            cases=cases,
            reasons=reasons,
            vectors=vectors,
            language=language,
        )
    every = [(scores[id(line)], line) for line in lines]
    scored = _scored_or_first(every, lines)
    if not scored:
        return []
    best_score = max(s for s, _ in scored)
    by_document: dict[str, list[tuple[float, _Line]]] = {}
    for item in scored:
        by_document.setdefault(_document(item[1].passage), []).append(item)
    speaks = {d: _speaks(passages, d, language) for d in _document_fit(by_document)}

    def unsaid(document: str) -> set[str]:
        """The question's own words that `document` never says (its lines, titles and
        headings); words that say what kind of answer is wanted ("pedir", "quanto") name no
        topic."""
        said = set().union(
            *(line.stems for line in lines if _document(line.passage) == document),
            *(context[id(p)] for p in passages if _document(p) == document),
        )
        return set(_own_terms(terms)) - said - _cue_stems(language)

    primary = _primary_document(
        _Contest(lines, passages, terms, language, every, by_document, speaks, unsaid),
        lead=lead,
        firm_lead=firm_lead,
    )
    chosen = _pick(by_document[primary], best_score, limit=limit)
    chosen = _with_asked_kind(chosen, every, primary, kind, limit)
    chosen = _with_other_topics(chosen, by_document, primary, speaks, unsaid(primary), limit)
    return _with_steps(_with_qualifiers(chosen, lines), lines, kind)


# A sentence that opens by qualifying the one before it ("Porém, o aviso prévio não corre
# durante as férias", "However, ...", "Sin embargo, ...").
_QUALIFIER = re.compile(
    r"^(?:porem|no entanto|contudo|entretanto|todavia|sin embargo|no obstante|pero|however|but|"
    r"nevertheless|nonetheless)\b"
)


def _with_qualifiers(
    chosen: list[tuple[float, _Line]], lines: Sequence[_Line]
) -> list[tuple[float, _Line]]:
    """A chosen sentence keeps the "porém / however" that follows it in its paragraph:
    shown alone it would say less than the page ("O pedido de demissão pode ser apresentado
    a qualquer momento, inclusive durante as férias." without "Porém, o aviso prévio não
    corre durante as férias")."""
    following = {_key(line): line for line in lines if line.joined and _QUALIFIER.match(line.norm)}
    if not following:
        return chosen
    out: list[tuple[float, _Line]] = []
    merged: set[_Key] = set()  # qualifiers now said with their sentence
    for score, line in chosen:
        nxt = following.get((id(line.passage), line.order + 1))
        if nxt is not None and line.step is None:
            line = replace(line, text=f"{line.text} {nxt.text}", stems=line.stems | nxt.stems)
            merged.add(_key(nxt))
        out.append((score, line))
    return [(s, line) for s, line in out if _key(line) not in merged]


# A line that sends the reader to another page ("As regras de perda ... estão em política
# específica", "aplica-se a política de devolução de equipamentos", 'veja os valores em
# "Viagens internacionais"', '(ver "Registro de jornada")'), matched on normalised text.
_PAGE = r"(?:politica|norma|regulamento|pagina|policy|page)s?"
_POINTER = re.compile(
    rf"\b{_PAGE}\b[^;]*\b(?:especifica|propria|correspondiente|specific)s?\b"
    rf"|\b(?:ver|veja|vea|vease|consulte|see)\b[^;]{{0,40}}(?:[\"“«']|\b{_PAGE}\b)"
    r"|\b(?:estao|esta|seguem?|aplica-se|se aplica|se rigen?|regulad[ao]|descrit[oa]s|constam?|"
    rf"previst[ao]|conforme|segun|follows?|governed by|covered by)\b[^;]*\b{_PAGE}\b"
)
# The words of a pointer that name no page ("as regras ... seguem a política específica").
_POINTER_WORDS = frozenset(
    normalize(
        "politica politicas norma normas regulamento pagina paginas policy page pages especifica "
        "especificas propria correspondiente specific regra regras regla reglas rules ver veja "
        "vea vease consulte see segue seguem sigue siguen aplica rige rigen regulada regulado "
        "descritos descritas constam consta prevista previsto conforme segun valores"
    ).split()
)


def _clauses(line: _Line) -> list[tuple[str, bool]]:
    """A line's clauses (split at ";"), each with whether it sends the reader elsewhere."""
    return [(c, bool(_POINTER.search(normalize(c)))) for c in line.text.split(";")]


def _referred(
    lines: Sequence[_Line],
    document: str,
    language: str,
    scored: Mapping[int, float],
    own: Set[str],
) -> str | None:
    """The shown page that `document`'s lines send the reader to for what is asked.

    A pointer ("as regras de perda estão em política específica") names a page by words of
    its title. It counts when the words it shares with that title (beyond the sending
    page's own title) hold a word of the question that the sending page says nowhere else
    ("perdi" on the card's usage page, which speaks of losing a card only in its pointer to
    "Cartão corporativo — perda, uso indevido ..."). With several pages named, the one whose
    title the pointer says most of; a tie names none."""
    titles = {_document(line.passage): line.passage.title for line in lines}
    own_title = _stems(titles.get(document, ""), language)
    others = {d: _stems(t, language) - own_title for d, t in titles.items() if d != document}
    mine = {id(line): _clauses(line) for line in lines if _document(line.passage) == document}
    says = set().union(
        *(_stems(c, language) for clauses in mine.values() for c, points in clauses if not points)
    )
    asked = set(own) - says
    stop = stopwords_for(language)
    named: dict[str, int] = {}
    for key, clauses in mine.items():
        if scored.get(key, 0.0) <= 0:
            continue
        for clause, points in clauses:
            if not points:
                continue
            words = {
                stem(t.text, language)
                for t in token_spans(clause)
                if is_content_word(t.norm, stop) and t.norm not in _POINTER_WORDS
            }
            for other, title in others.items():
                shared = words & title
                if shared & asked:
                    named[other] = max(named.get(other, 0), len(shared))
    most = max(named.values(), default=0)
    winners = [d for d, n in named.items() if n == most]
    return winners[0] if len(winners) == 1 else None


# Kinds whose answer is a figure the line must state: a date or duration, an amount.
_FIGURE_KINDS: frozenset[AnswerKind] = frozenset({"duration", "amount"})


def _with_asked_kind(
    chosen: list[tuple[float, _Line]],
    scored: Sequence[tuple[float, _Line]],
    document: str,
    kind: AnswerKind | None,
    limit: int,
) -> list[tuple[float, _Line]]:
    """A question that asks when or how much gets the best line that says it first: a
    chosen one, else `document`'s best, even when other lines share more of its words
    (a when-is-it-paid question: the line with the dates names neither the verb nor the
    benefit). `scored` holds every line with its score, those sharing no word included."""
    if kind not in _FIGURE_KINDS or not chosen:
        return chosen
    says = _KIND_EVIDENCE[kind]
    stating = [item for item in chosen if says.search(item[1].norm)]
    if stating:
        # The most direct line first: the best of those that state it.
        return [stating[0], *(item for item in chosen if item is not stating[0])]
    fitting = [
        item
        for item in scored
        if _document(item[1].passage) == document and says.search(item[1].norm)
    ]
    if not fitting:
        return chosen
    best = max(fitting, key=lambda item: (item[0], -item[1].rank, -item[1].order))
    return [best, *chosen[: max(0, limit - 1)]]


def _own_terms(terms: Mapping[str, float]) -> frozenset[str]:
    """The question's own words: those the person wrote, not carried nor expanded."""
    return frozenset(t for t, w in terms.items() if w >= 1.0)


def _says_own_words(items: Sequence[tuple[float, _Line]], terms: Mapping[str, float]) -> bool:
    """Whether a document's lines say a word of the question itself (not a carried one);
    a question with no word of its own (all carried) counts as said."""
    own = _own_terms(terms)
    return not own or any(own & line.stems for _, line in items)


def _document_fit(by_document: Mapping[str, list[tuple[float, _Line]]]) -> dict[str, float]:
    """How well each document answers: the mean of its best lines, so that one stray line
    that shares a rare word does not outweigh a document that answers with several."""
    out: dict[str, float] = {}
    for document, items in by_document.items():
        # Overlapping chunks of one page repeat a line: it counts once.
        best: dict[str, float] = {}
        for score, line in items:
            key = line.norm
            best[key] = max(score, best.get(key, 0.0))
        top = sorted(best.values(), reverse=True)[:TOP_LINES]
        out[document] = sum(top) / TOP_LINES
    return out


def _speaks(passages: Sequence[Passage], document: str, language: str) -> bool:
    """Whether `document` is written in the turn's language (or in none that is known).

    A country's pages are written in its own language: when the answering page speaks the
    turn's, a page in another that only shares words with the question neither takes the
    answer over nor adds lines to it (a Spanish question about a loan got a Portuguese
    IT-accounts page's lines). The language is the document's own, as it was indexed."""
    known = {p.language for p in passages if _document(p) == document} - {""}
    return not known or language in known


def _document(passage: Passage) -> str:
    return passage.document or passage.title


def _pick(
    items: list[tuple[float, _Line]], best: float, limit: int = MAX_LINES
) -> list[tuple[float, _Line]]:
    """The best lines of one document, down to the line model's `keep` share of the best,
    within the budget."""
    ranked = sorted(items, key=lambda item: (-item[0], item[1].rank, item[1].order))
    keep = line_model().keep
    picked: list[tuple[float, _Line]] = []
    words = 0
    seen: set[str] = set()
    for score, line in ranked:
        if len(picked) >= limit or (picked and score < keep * best):
            break
        key = line.norm
        if key in seen:
            continue
        if picked and words + len(line.text.split()) > WORD_BUDGET:
            continue
        seen.add(key)
        picked.append((score, line))
        if len(picked) > 1:
            words += len(line.text.split())
    return picked


def _with_steps(
    chosen: list[tuple[float, _Line]], lines: Sequence[_Line], kind: AnswerKind | None
) -> list[tuple[float, _Line]]:
    """Blocks answer whole: a chosen line that ends in ":" brings the list it introduces (up
    to LIST_ITEMS); a chosen numbered step its whole procedure (a short one whatever is
    asked, any when the question asks how); a chosen table row its whole table, when the
    table is short (a long one gives its chosen rows, each with its column names)."""
    out = list(chosen)
    have = {_key(line) for _, line in chosen}
    tune = tuning()

    def bring(score: float, others: Sequence[_Line]) -> None:
        for other in others:
            if _key(other) not in have:
                have.add(_key(other))
                out.append((score - 1e-6, other))

    for score, line in chosen:
        if line.text.endswith(":"):
            items = [o for o in lines if o.passage is line.passage and o.lead == line.order]
            bring(score, items[:LIST_ITEMS])
        if line.step is not None:
            steps = [o for o in lines if o.passage is line.passage and o.block == line.block]
            if kind == "steps" or sum(len(o.text.split()) for o in steps) <= tune.procedure_words:
                bring(score, steps)
        if line.table >= 0:
            rows = [o for o in lines if o.passage is line.passage and o.table == line.table]
            if len(rows) <= tune.table_rows:
                bring(score, rows)
    return out


def _render(
    question: str,
    language: str,
    kind: AnswerKind | None,
    chosen: list[tuple[float, _Line]],
    subject: str | None = None,
) -> str:
    """Opening line, then the most direct line first (a table's other rows follow in their
    order); steps as a numbered block, in order."""
    if not chosen:
        return _FOUND[language]
    first_score, first = chosen[0]
    rest = sorted(
        chosen[1:], key=lambda item: (item[1].rank, item[1].passage.position, item[1].order)
    )
    # A list's items follow the line that introduces it, in their own order; an item chosen
    # without its introduction is an ordinary line.
    present = {_key(line) for _, line in chosen}
    nested = {
        id(line)
        for _, line in chosen
        if line.lead >= 0 and (id(line.passage), line.lead) in present
    }
    ordered = [first] + [line for _, line in rest if id(line) not in nested]
    for item in sorted((x for _, x in rest if id(x) in nested), key=lambda x: -x.order):
        at = next(
            i for i, x in enumerate(ordered) if x.passage is item.passage and x.order == item.lead
        )
        ordered.insert(at + 1, item)
    # Steps of one procedure stay together and in their own order.
    blocks: dict[tuple[int, int], list[_Line]] = {}  # by (passage identity, block)
    for line in ordered:
        if line.step is not None:
            blocks.setdefault((id(line.passage), line.block), []).append(line)
    body: list[str] = []
    done: set[tuple[int, int]] = set()
    for line in ordered:
        if line.step is not None and len(blocks[(id(line.passage), line.block)]) > 1:
            key = (id(line.passage), line.block)
            if key in done:
                continue
            done.add(key)
            for step in sorted(blocks[key], key=lambda s: s.order):
                body.append(f"{step.step}. {step.text} [{step.passage.number}]")
            continue
        # A list's item sits under the line that introduces it; a procedure's one step, shown
        # without the rest, is an ordinary line ("3." alone among bullets reads as a list cut).
        mark = "  - " if id(line) in nested else "- "
        body.append(f"{mark}{line.text} [{line.passage.number}]")
    opener = opening_line(question, language, kind, first.passage.title, subject=subject)
    if len(body) == 1:
        return f"{opener}\n\n{body[0].removeprefix('- ')}"
    return f"{opener}\n\n" + "\n".join(body)
