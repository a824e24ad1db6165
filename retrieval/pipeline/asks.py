"""What a question asks for, from its wording (pure): a duration, an amount, a condition or
the steps of a request.

The answer lifts the lines that state it; the words that ask it ("prazo", "quanto",
"posso") name no topic, so the readings of a short question are not told apart by them.
"""

from __future__ import annotations

import re
from typing import Literal

from .text import normalize, token_spans

AnswerKind = Literal["duration", "amount", "condition", "steps"]

# What the question asks for, from its wording (normalised, accents stripped), tried in
# this order: "quanto tempo" is a duration before "quanto" is an amount.
_CUE_PHRASES: tuple[tuple[AnswerKind, tuple[str, ...]], ...] = (
    (
        "duration",
        (
            "quanto tempo",
            "qnto tempo",
            "qto tempo",
            "prazo",
            "prazos",
            "quando",
            "qnd",
            "qdo",
            "ate quando",
            "que dia",
            "data",
            "cuanto tiempo",
            "plazo",
            "cuando",
            "hasta cuando",
            "que fecha",
            "fecha",
            "how long",
            "when",
            "deadline",
            "by when",
            "what date",
            "vencimento",
            "vence",
            # how far ahead: "com quanta antecedência", "con cuánta anticipación"
            "antecedencia",
            "anticipacion",
            # a count of days, weeks or months is a duration, not an amount of money
            "quantos dias",
            "qntos dias",
            "quantas semanas",
            "quantos meses",
            "quantas horas",
            "cuantos dias",
            "cuantas semanas",
            "cuantos meses",
            "cuantas horas",
            "how many days",
            "how many weeks",
            "how many months",
            "how many hours",
            # how often is a period too, not an amount
            "quantas vezes",
            "qntas vezes",
            "cuantas veces",
            "how often",
            "how many times",
        ),
    ),
    (
        "amount",
        (
            "quanto",
            "qnto",
            "qto",
            "quanta",
            "quantos",
            "quantas",
            "valor",
            "valores",
            "teto",
            "limite",
            "custa",
            "custo",
            "quanto sai",
            "cuanto sale",
            "percentual",
            "desconto",
            "cuanto",
            "cuanta",
            "cuantos",
            "cuantas",
            "monto",
            "importe",
            "tope",
            "cuesta",
            "how much",
            "how many",
            "amount",
            "limit",
            "cost",
            "rate",
            "percent",
            "fee",
            "price",
        ),
    ),
    ("duration", ("demora", "tarda")),
    (
        "steps",
        (
            "como",
            "onde",
            "donde",
            "how do",
            "how can",
            "how to",
            "where",
            "peco",
            "solicito",
            "pedir",
            "solicitar",
            "request",
            "apply",
            "registrar",
            "tramite",
            "indico",
            "cobro",
            "mandar",
            "enviar",
        ),
    ),
    (
        "condition",
        (
            "posso",
            "pode",
            "podem",
            "tenho direito",
            "tem direito",
            "direito",
            "vale para",
            "vale pra",
            "recebe",
            "recebo",
            "ganho",
            "ganha",
            "perco",
            "perde",
            "mantem",
            "manter",
            "continua",
            "precisa",
            "da pra",
            "da para",
            "tem como",
            "consigo",
            "puedo",
            "se puede",
            "es posible",
            "puede",
            "tengo derecho",
            "derecho",
            "corresponde",
            "pierdo",
            "mantiene",
            "can i",
            "am i",
            "do i",
            "is it",
            "entitled",
            "eligible",
            "allowed",
            "keep",
            "lose",
            "need",
        ),
    ),
)
# "como" asks how only where a clause starts ("como peço", "e como incluo"); inside one it
# compares ("conta como extra", "tanto como").
_CLAUSE_ONLY = frozenset({"como"})
_CLAUSE_START = r"(?:^|[,;:!?.]\s*|\b(?:e|y|mas|pero|and|sabe|sabes|sabem)\s+)"
_KIND_CUES: tuple[tuple[AnswerKind, re.Pattern[str]], ...] = tuple(
    (
        kind,
        re.compile(
            "|".join(
                [
                    r"\b(?:"
                    + "|".join(re.escape(p) for p in phrases if p not in _CLAUSE_ONLY)
                    + r")\b"
                ]
                + [_CLAUSE_START + re.escape(p) + r"\b" for p in phrases if p in _CLAUSE_ONLY]
            )
        ),
    )
    for kind, phrases in _CUE_PHRASES
)
# The units in "quantos dias" name what is counted, a topic word ("banco de horas").
_UNITS = frozenset({"dias", "semanas", "meses", "horas", "days", "weeks", "months", "hours"})
# "quantas vezes" asks how often: "vezes" names no topic (see _topic_tokens).
COUNTING_WORDS = frozenset({"vezes", "veces", "times"})
CUE_WORDS = frozenset(
    w for _, phrases in _CUE_PHRASES for p in phrases for w in p.split() if w not in _UNITS
)
# A period, as a noun or an adjective ("o limite mensal", "el tope anual"): it says how a
# figure is counted, not what it is about.
PERIOD_WORDS = frozenset(
    "dia dias semana semanas mes meses ano anos diario diaria diarios semanal mensal anual "
    "mensual day days week weeks month months year years daily weekly "
    "monthly yearly annual".split()
)


def names_no_topic(term: str) -> bool:
    """Whether a content word only asks for a kind of answer or says a period ("qual é o
    limite mensal?" asks about whatever the message named before)."""
    word = normalize(term)
    return word in CUE_WORDS or word in PERIOD_WORDS or word in COUNTING_WORDS


# "How does it work" and "what happens if" ask for the rule itself, not for the steps of
# a request ("o que acontece se eu pedir demissão?" names "pedir", a request word).
_GENERAL = re.compile(
    r"\b(?:como funciona|como e que funciona|como fica|como era|como eram|como funcionava|"
    r"como va|como es|how does|how do(?:es)? \w+ work|what are the rules|"
    # what happens if: the rule for a case, not the steps of a request
    r"o que acontece|que acontece|que pasa|que sucede|what happens)\b"
)


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
_ASKING = frozenset(
    "quanto quanta quantos quantas qnto qto qntos qntas qtos qtas "
    "cuanto cuanta cuantos cuantas".split()
)
_COUNTED_AFTER = frozenset({"quantas", "qntas", "qtas", "cuantas", "many"})


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
