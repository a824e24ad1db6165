"""Unit tests for the shared text utilities (pure, no database)."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from retrieval.pipeline.text import (
    STOPWORDS,
    content_terms,
    detect_language,
    normalize,
    token_spans,
    tokenize,
)


def test_normalize_strips_accents_and_case() -> None:
    assert normalize("Férias") == "ferias"
    assert normalize("AÇÃO Reembolço") == "acao reembolco"
    assert normalize("Año") == "ano"


def test_normalize_turns_ordinal_indicators_into_letters() -> None:
    assert normalize("13º") == "13o"
    assert normalize("13°") == "13o"
    assert normalize("1ª") == "1a"


def _normalize_in_full(s: str) -> str:
    """The documented steps, without normalize's shortcut for ASCII."""
    decomposed = unicodedata.normalize("NFKD", s.replace("°", "º").casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


@given(st.text(st.characters(max_codepoint=127)) | st.text())
def test_normalize_of_ascii_is_the_full_normalisation(text: str) -> None:
    assert normalize(text) == _normalize_in_full(text)


def test_tokenize_keeps_compounds_ordinals_and_acronyms() -> None:
    text = "Regra do VR no home-office, 13º salário e e-mail d'água"
    assert tokenize(text) == [
        "Regra",
        "do",
        "VR",
        "no",
        "home-office",
        "13º",
        "salário",
        "e",
        "e-mail",
        "d'água",
    ]


def test_tokenize_keeps_numbers_and_placeholders_whole() -> None:
    assert tokenize("R$ 1.500,00 até 12/2024 para [EMAIL_1]") == [
        "R",
        "1.500,00",
        "até",
        "12/2024",
        "para",
        "[EMAIL_1]",
    ]


def test_tokenize_drops_the_english_possessive() -> None:
    assert tokenize("Huntington's disease and the Patriots’ coach") == [
        "Huntington",
        "disease",
        "and",
        "the",
        "Patriots",
        "coach",
    ]


def test_token_spans_point_into_the_text() -> None:
    text = "Quantos dias de férias no 13º?"
    for token in token_spans(text):
        assert text[token.start : token.end] == token.text
        assert token.norm == normalize(token.text)


def test_detect_language_portuguese() -> None:
    assert detect_language("como funciona o reembolso de despesas?") == "pt"
    assert detect_language("e para quem é PJ?") == "pt"
    assert detect_language("qual é a regra de compensação do banco de horas") == "pt"


def test_detect_language_spanish() -> None:
    assert detect_language("¿cuántos días de vacaciones tengo en España?") == "es"
    assert detect_language("y en Chile?") == "es"
    assert detect_language("el seguro médico cubre a mi pareja") == "es"


def test_detect_language_english() -> None:
    assert detect_language("how do I claim travel expenses?") == "en"
    assert detect_language("and for contractors?") == "en"


def test_detect_language_is_unsure_without_evidence() -> None:
    assert detect_language("férias") is None
    assert detect_language("VR") is None
    assert detect_language("") is None


def test_stopwords_are_normalised_and_include_chat_filler() -> None:
    for words in STOPWORDS.values():
        assert all(normalize(w) == w for w in words)
    assert {"qual", "como", "funciona", "regra", "quero", "saber", "me", "diga"} <= STOPWORDS["pt"]
    assert {"cual", "puedo", "quiero", "dime"} <= STOPWORDS["es"]
    assert {"tell", "please", "what", "the"} <= STOPWORDS["en"]


def test_stopwords_keep_hr_content_words() -> None:
    for word in ("ferias", "dias", "vale", "reembolso", "vacaciones", "expenses", "salario"):
        assert all(word not in words for words in STOPWORDS.values())


def test_content_terms_drop_stopwords_and_filler() -> None:
    assert content_terms("Quero saber como funciona o reembolso de despesas") == [
        "reembolso",
        "despesas",
    ]
    assert content_terms("please tell me the per diem for contractors", "en") == [
        "per",
        "diem",
        "contractors",
    ]


def test_content_terms_drop_placeholders_and_keep_numbers() -> None:
    assert content_terms("mande para [EMAIL_1] o 13º de 2024", "pt") == ["mande", "13o", "2024"]


def test_content_terms_without_a_language_remove_all_stopwords() -> None:
    assert content_terms("VR home") == ["vr", "home"]


@given(st.text())
def test_text_utilities_never_raise(text: str) -> None:
    tokens = token_spans(text)
    assert [t.text for t in tokens] == tokenize(text)
    assert all(text[t.start : t.end] == t.text for t in tokens)
    detect_language(text)
    content_terms(text)
    assert normalize(normalize(text)) == normalize(text)
