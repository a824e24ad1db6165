"""Language cues that tell whether a turn leans on the conversation (pt, es, en).

Words are in normalised form (no accents, case-folded) unless a name says "surface": a
few Portuguese and Spanish words differ from a verb only by an accent ("esta"/"está").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from retrieval.pipeline.text import LANGUAGES, Token, token_spans

_LANGS: tuple[str, ...] = LANGUAGES


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Pronouns and demonstratives that point back at something said before.
ANAPHORS: dict[str, frozenset[str]] = {
    "pt": _set(
        "isso isto aquilo disso disto daquilo nisso nisto naquilo esse essa esses essas desse "
        "dessa desses dessas nesse nessa nesses nessas deste desta destes destas neste nesta "
        "nestes nestas aquele aquela aqueles aquelas daquele daquela naquele naquela ele ela "
        "eles elas dele dela deles delas nele nela neles nelas"
    ),
    "es": _set(
        "eso esto aquello ese esa esos esas aquel aquella aquellos aquellas ella ellos ellas "
        "alli alla ahi"
    ),
    "en": _set(
        "it its itself they them their theirs themselves he him his she her hers these those"
    ),
}
# Demonstratives that are also verb forms without their accent: count them only as
# determiners, written without the accent and followed by a content word ("esta regra").
DETERMINERS_SURFACE: dict[str, frozenset[str]] = {
    "pt": _set("este esta estes estas"),
    "es": _set("este esta estos estas"),
    "en": frozenset(),  # "this" has its own rule below
}
# "esta semana", "this week": deictic time, not a reference to the conversation.
_TIME_WORDS = _set(
    "week weekend month year semester quarter time morning afternoon evening today "
    "semana mes ano semestre trimestre vez momento manha tarde noite manana noche"
)
SURFACE_ANAPHORS: dict[str, frozenset[str]] = {
    "pt": _set("lá"),
    # "le"/"les" are only ever pronouns in Spanish (whether "they" will deduct something from
    # a person's pay, after a colleague's stolen laptop); "lê" (reads) keeps its accent.
    "es": _set("él le les"),
    "en": frozenset(),
}
# Spanish object pronouns before the verb: two together ("me la pueden adelantar?") or one
# opening the turn before a verb of asking ("lo puedo pedir?") point back at a thing.
_ES_OBJECT = _set("lo la los las")
_ES_DATIVE = _set("me te se nos le les")
_ES_OF = _set("de del")
_ES_VERBS_AFTER = _set(
    "puedo puede pueden podes podemos tengo tiene tienen tenes debo debe deben pido piden "
    "pago pagan cobro cobran devuelvo devuelven uso usan paso pasan"
)
# "¿a quién le pido...?": the pronoun doubles the "quién" beside it, nothing said before.
_ES_DOUBLED_BY = _set("quien quienes")
# Two-word references: "o mesmo", "lo mismo", "the same".
ANAPHOR_PHRASES: dict[str, tuple[tuple[str, str], ...]] = {
    "pt": (("o", "mesmo"), ("a", "mesma"), ("os", "mesmos"), ("as", "mesmas"), ("mesma", "coisa")),
    "es": (("lo", "mismo"), ("la", "misma"), ("los", "mismos"), ("las", "mismas")),
    "en": (("the", "same"), ("the", "former"), ("the", "latter")),
}
# Words that, ending a clause, leave out what they refer to ("...pedir demissão no meio").
DANGLING: dict[str, frozenset[str]] = {
    "pt": _set("meio durante depois antes"),
    "es": _set("medio durante despues antes"),
    "en": _set("during middle afterwards after before"),
}
_CLITIC_RE: dict[str, re.Pattern[str]] = {
    "pt": re.compile(r"\w-(?:lo|la|los|las|lhe|lhes)$"),
    "es": re.compile(r"\w{2,}[aei]r(?:se)?(?:lo|la|los|las)$"),
    "en": re.compile(r"(?!)"),  # English has no clitics
}
# "It" that refers to nothing: "is it possible to...", "is it worth...".
_EXPLETIVE_NEXT = _set(
    "possible worth true necessary important ok okay safe better best hard easy required "
    "recommended mandatory allowed normal common legal advisable enough"
)
_BE = _set("is are was were be been being isn't aren't wasn't weren't exist exists seem seems")
# Words after which "that" is a pronoun rather than a conjunction: "about that", "does that".
_THAT_PRONOUN_AFTER = _set(
    "is was are about of for with do does did on in to by from after before like than and "
    "or mean means use using"
)

# Turn openers that continue the previous question: "e para PJ?", "y en Chile?".
OPENERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "pt": (
        ("e",),
        ("mas", "e"),
        ("quanto", "a"),
        ("quanto", "ao"),
        ("quanto", "aos"),
        ("quanto", "as"),
        ("tambem",),
        ("e", "quanto"),
        ("e", "se"),
        ("mas", "e", "se"),
        ("e", "no", "caso"),
        ("e", "em", "caso"),
    ),
    "es": (
        ("y",),
        ("pero", "y"),
        ("en", "cuanto"),
        ("que", "tal"),
        ("tambien",),
        ("y", "si"),
        ("pero", "y", "si"),
        ("y", "en", "caso"),
    ),
    "en": (
        ("and",),
        ("what", "about"),
        ("how", "about"),
        ("what", "if"),
        ("also",),
        ("but", "what"),
        ("same", "for"),
        ("and", "if"),
        ("but", "if"),
    ),
}
# Openers of a hypothetical ("e se eu estiver de férias?"): they always continue.
_HYPOTHETICAL = frozenset({"se", "si", "if", "caso"})
# Phrases that ask about the previous topic without naming it ("muda alguma coisa se...").
_CONTINUATIONS: tuple[tuple[str, ...], ...] = (
    ("muda", "alguma", "coisa"),
    ("muda", "algo"),
    ("vale", "tambem"),
    ("tambem", "vale"),
    ("cambia", "algo"),
    ("aplica", "tambien"),
    ("tambien", "aplica"),
    ("anything", "change"),
    ("anything", "different"),
    ("any", "difference"),
    ("also", "apply"),
    ("still", "apply"),
    ("apply", "too"),
)
# Leading chatter skipped before looking for an opener: "ok, e para PJ?".
_LEAD_FILLER = _set(
    "ok okay so then great thanks entendi certo beleza bueno vale perfeito perfecto"
)
# Explicit topic changes: "mudando de assunto", "changing the subject".
_SWITCH_VERBS = _set("mudando mudar trocando cambiando cambiar changing change switching switch")
_SWITCH_NOUNS = _set("assunto tema subject topic topics")
_SWITCH_PHRASES = (
    ("outra", "pergunta"),
    ("outra", "duvida"),
    ("nova", "pergunta"),
    ("outro", "assunto"),
    ("otra", "pregunta"),
    ("otra", "duda"),
    ("nueva", "pregunta"),
    ("otro", "tema"),
    ("another", "question"),
    ("new", "question"),
    ("different", "question"),
    ("unrelated",),
    ("another", "topic"),
    ("different", "topic"),
    ("outro", "tema"),
    ("otro", "asunto"),
    ("otra", "cosa"),
    ("outra", "coisa"),
    ("otra", "consulta"),
    ("outra", "consulta"),
    ("something", "else"),
    ("mudando", "de"),
    ("mudanca", "de"),
)
# "e sobre …", "y sobre …", "e acerca de …": a subject of its own unless it is a facet.
_ABOUT_OPENERS = frozenset({("e", "sobre"), ("y", "sobre"), ("e", "acerca"), ("y", "acerca")})
_ARTICLES = _set("o a os as um uma el la los las un una do da dos das de del")
# Phrases that change the subject only where a turn starts ("outra coisa, quanto é...";
# "posso fazer outra coisa?" does not): checked within the first words.
_SWITCH_OPENING = 4
# Words that open a question or a clause with its own verb, after "e"/"y"/"and" or ",".
QUESTION_STARTERS: dict[str, frozenset[str]] = {
    "pt": _set(
        "como qual quais quanto quanta quantos quantas quando onde quem porque oque posso "
        "pode podem devo preciso precisa tenho tem existe existem se"
    ),
    "es": _set(
        "como cual cuales cuanto cuanta cuantos cuantas cuando donde quien porque puedo "
        "puede pueden debo necesito necesita tengo tiene hay existe si"
    ),
    "en": _set(
        "how what when where which who whom why can could do does did is are was were should "
        "will would if may must"
    ),
}
# Two-word starters: "o que", "por que", "lo que", "por qué".
QUESTION_STARTER_PAIRS = frozenset({("o", "que"), ("por", "que"), ("lo", "que"), ("que", "es")})
CONJUNCTIONS = _set("e y and")


def _langs(lang: str | None) -> tuple[str, ...]:
    return (lang,) if lang in _LANGS else _LANGS


def _is_expletive_it(words: Sequence[str], i: int) -> bool:
    after = set(words[i + 1 : i + 4])
    return bool(after & _EXPLETIVE_NEXT)


def _is_pronoun_that(words: Sequence[str], i: int) -> bool:
    if i == len(words) - 1 or i == 0:
        return True
    return words[i - 1] in _THAT_PRONOUN_AFTER


def _is_locative_there(words: Sequence[str], i: int) -> bool:
    nxt = words[i + 1] if i + 1 < len(words) else ""
    prev = words[i - 1] if i else ""
    return nxt not in _BE and prev not in _BE


def _is_object_pronoun(words: Sequence[str], i: int) -> bool:
    """ "me la pueden adelantar?", "se lo descuentan?", "lo puedo pedir?", and the noun left
    out in "la de junio", "los de la cooperativa" (Spanish)."""
    if words[i] not in _ES_OBJECT or i + 1 >= len(words):
        return False
    if words[i] != "lo" and words[i + 1] in _ES_OF:
        return True
    after_dative = i > 0 and words[i - 1] in _ES_DATIVE
    return after_dative or (i == 0 and words[1] in _ES_VERBS_AFTER)


def _is_same_phrase(words: Sequence[str], i: int, code: str, content: frozenset[str]) -> bool:
    """ "o mesmo vale para PJ?" points back; "recebem o mesmo salário" does not."""
    if i + 1 >= len(words) or (words[i], words[i + 1]) not in ANAPHOR_PHRASES[code]:
        return False
    return i + 2 >= len(words) or words[i + 2] not in content


def find_anaphors(tokens: Sequence[Token], lang: str | None, content: frozenset[str]) -> list[int]:
    """Return the positions of words that refer back to something said before."""
    words = [t.norm for t in tokens]
    found: list[int] = []
    for i, token in enumerate(tokens):
        word, surface = words[i], token.text.casefold()
        nxt = words[i + 1] if i + 1 < len(words) else ""
        for code in _langs(lang):
            if code == "en" and word == "it" and _is_expletive_it(words, i):
                continue
            if word in ANAPHORS[code] and nxt in _TIME_WORDS:
                continue  # "desse ano", "nesta semana": this year, not "that one"
            prev = words[i - 1] if i else ""
            if code == "es" and surface in SURFACE_ANAPHORS[code] and prev in _ES_DOUBLED_BY:
                continue
            hit = (
                word in ANAPHORS[code]
                or surface in SURFACE_ANAPHORS[code]
                or (surface in DETERMINERS_SURFACE[code] and nxt in content - _TIME_WORDS)
                or (code == "es" and _is_object_pronoun(words, i))
                or (code == "en" and word == "this" and nxt not in _TIME_WORDS)
                or (code == "en" and word == "that" and _is_pronoun_that(words, i))
                or (code == "en" and word == "there" and _is_locative_there(words, i))
                or bool(_CLITIC_RE[code].search(word))
                or _is_same_phrase(words, i, code, content)
                or any(tuple(words[i : i + len(p)]) == p for p in _CONTINUATIONS)
                or (i == len(words) - 1 and i > 0 and word in DANGLING[code])
            )
            if hit:
                found.append(i)
                break
    return found


# Words that ask about a facet of a topic rather than name one ("qual o prazo?", "what is the
# cost?"): an elliptical follow-up that swaps the topic keeps them ("e férias?" after "prazo
# do reembolso" asks for the vacation deadline).
FACETS = _set(
    """
    prazo prazos valor valores limite limites quanto quantos quantas regra regras desconto
    descontos documento documentos requisito requisitos direito direitos pagamento data
    datas dia dias periodo procedimento processo custo custos taxa taxas percentual politica
    carencia aviso multa calculo teto minimo maximo horario frequencia elegibilidade
    plazo plazos limite cuanto cuantos cuantas regla reglas descuento pago fecha fechas
    procedimiento proceso costo coste tasa porcentaje
    deadline deadlines value amount limit limits many much rule rules discount requirement
    requirements eligibility right rights payment date dates day days period process
    procedure cost costs price prices fee fees rate rates percentage policy minimum maximum
    """
)


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
_START_PHRASES: tuple[tuple[str, ...], ...] = (
    ("primeiro", "assunto"),
    ("primeira", "pergunta"),
    ("primeira", "duvida"),
    ("primeira", "coisa"),
    ("inicio", "da", "conversa"),
    ("comeco", "da", "conversa"),
    ("lo", "primero"),
    ("primer", "tema"),
    ("primera", "pregunta"),
    ("primera", "consulta"),
    ("principio", "de", "la", "conversacion"),
    ("first", "question"),
    ("first", "topic"),
    ("first", "thing"),
    ("start", "of", "the", "conversation"),
)


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
_DEFINITION_STARTS = (("what", "is"), ("what", "are"), ("explain",), ("define",))
_DEFINITION_OPENERS = _set("so and ok okay then but")
_POINTING_WORDS = _set(
    "the this that these those it its they them their there here such other others another "
    "same which all some any more each both either former latter he she his her him"
)


def names_what_it_defines(tokens: Sequence[Token], lang: str | None) -> bool:
    """Whether an English turn asks what something is and names that thing in full: "what
    are VPC clusters?" asks about VPC clusters whatever came before; "what is the
    difference?" or "what is it?" asks about the conversation's subject. Portuguese and
    Spanish put an article before any noun, so only English says this by its words."""
    if lang != "en":
        return False
    words = [t.norm for t in tokens]
    while words and words[0] in _DEFINITION_OPENERS:
        words = words[1:]
    for start in _DEFINITION_STARTS:
        if tuple(words[: len(start)]) == start:
            subject = words[len(start) :]
            return bool(subject) and not any(w in _POINTING_WORDS for w in subject)
    return False
