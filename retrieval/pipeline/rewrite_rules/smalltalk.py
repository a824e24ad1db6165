"""Tell thanks, greetings, acknowledgements and goodbyes from questions (pt, es, en).

A turn is small talk only when every word of it is small talk: "obrigado!", "valeu 👍",
"gracias, era eso", "ok, entendi", "bom dia". One word of a question ("obrigado, e para
PJ?", "oi, qual o prazo do VR?") makes it a question, so nothing is lost by guessing wrong
in that direction. Small talk is answered politely and searches nothing: searching
"obrigado" together with the previous topic reopened it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from retrieval.pipeline.languages import phrases
from retrieval.pipeline.rewrite_rules.lexicon import edit_distance
from retrieval.pipeline.text import normalize

# Kind of each small-talk word, in normalised form. Chat spellings are words of their own.
_KINDS: dict[str, str] = {
    "thanks": """
        obrigado obrigada obrigadao obrigadinho obrigadinha brigado brigada obg obgd obgda
        vlw valeu valew agradeco agradecido agradecida grato grata gracias gracia grax
        graciass agradezco agradecida thanks thank thx tks ty tysm cheers appreciated
        appreciate merci
    """,
    "greeting": """
        oi oie ola hola alo hello hi hey hiya bom boa buen buenos buenas dia dias tarde
        tardes noite noites noche noches morning afternoon evening saludos
    """,
    "farewell": """
        tchau tchauzinho adeus falou flw chau chao adios bye goodbye hasta luego logo mais
        later vemos
    """,
    "ack": """
        ok okay okey oks blz beleza certo certinho entendi entendido entendida perfeito
        perfeita otimo otima show legal massa top joia combinado claro ta tah sim yes yep
        yeah si dale barbaro genial listo perfecto perfecta buenisimo bueno buena
        great cool nice perfect awesome understood got gotcha sure fine good excelente
        excellent maravilha bacana demais isso eso era esto ya
    """,
}
# Words that only go with small talk ("muito obrigado", "thank you so much", "por la
# ayuda", "tudo bem?"); alone they are not small talk.
_FILLERS = frozenset(
    normalize(
        """
        mil muito muita mto mt mesmo pela pelo ajuda ajudou por la el a o e y the you so much very
        lot lots a de do da nada tudo todo bem bien como vai voce vc tu usted que tal and it
        que all for help thanks again again de novo denovo novamente era isso eso ah ahh aah
        oh uhm hum hm kkk kkkk haha hahaha rs rsrs jaja jajaja lol jeje ai sim entao ai pessoal
        gente amigo amiga senor senora querido querida bo ta
        """
    ).split()
)
_KIND_OF: dict[str, str] = {
    word: kind for kind, words in _KINDS.items() for word in normalize(words).split()
}
# Letters (any script) and digits: everything else (emoji, punctuation) is ignored.
_WORD_RE = re.compile(r"[^\W_]+")
# Kinds in order of precedence when a turn mixes them ("ok, obrigado!" thanks).
_PRECEDENCE = ("thanks", "farewell", "greeting", "ack")
_MAX_WORDS = 12


@lru_cache(maxsize=4096)
def _kind_of(word: str) -> str | None:
    """Return the small-talk kind of one word, forgiving a typo in a long one ("obrigadp").

    Cached: a word unknown to the lists is compared with each long small-talk word.
    """
    kind = _KIND_OF.get(word)
    if kind is not None or len(word) < 6:
        return kind
    # Repeated letters ("obrigadooo", "valeeeu") and one slip of the finger.
    squeezed = re.sub(r"(.)\1+", r"\1", word)
    kind = _KIND_OF.get(squeezed)
    if kind is not None:
        return kind
    for known, known_kind in _KIND_OF.items():
        if len(known) >= 6 and abs(len(known) - len(word)) <= 1 and edit_distance(word, known) <= 1:
            return known_kind
    return None


def small_talk_kind(text: str) -> str | None:
    """Return "thanks", "greeting", "farewell" or "ack" when the turn is only that, else None.

    An empty turn, or one of emoji alone ("👍"), is an acknowledgement.
    """
    words = [normalize(w) for w in _WORD_RE.findall(text)]
    words = [re.sub(r"(.)\1{2,}", r"\1", w) for w in words]  # "obrigadooo", "valeuuu"
    if len(words) > _MAX_WORDS:
        return None
    kinds: list[str] = []
    for word in words:
        kind = _kind_of(word)
        if kind is not None:
            kinds.append(kind)
        elif word not in _FILLERS and not word.isdigit():
            return None
    if not words:
        return "ack" if text.strip() and "?" not in text else None
    if not kinds or ("?" in text and set(kinds) != {"greeting"}):
        return None  # "ok?", "e o vale?" ask something; "tudo bem?" is a greeting
    return next(k for k in _PRECEDENCE if k in kinds)


def small_talk_reply(kind: str, language: str | None) -> str:
    """Return the short, polite reply to a small-talk turn, in the turn's language."""
    replies = phrases(language).small_talk_replies
    return replies.get(kind) or replies["ack"]
