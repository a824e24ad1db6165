"""Unit tests for glossary matching, expansion and JSON import/export (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval.pipeline.glossary import (
    expand_with_glossary,
    find_glossary_hits,
    glossary_to_json,
    parse_glossary_json,
)
from retrieval.pipeline.types import GlossaryEntry, GlossaryHit

GLOSSARY = (
    GlossaryEntry("VR", "vale-refeição", "beneficios"),
    GlossaryEntry("PJ", "pessoa jurídica", "contratacao"),
    GlossaryEntry("home", "trabalho remoto"),
    GlossaryEntry("home office", "trabalho remoto", "beneficios"),
    GlossaryEntry("13º", "décimo terceiro salário", "remuneracao"),
    GlossaryEntry("UMA", "Unidad de Medida y Actualización", "nomina"),
    GlossaryEntry("IR", "imposto de renda"),
)


def terms(text: str) -> list[str]:
    return [hit.term for hit in find_glossary_hits(text, GLOSSARY)]


def test_match_ignores_case_accents_and_trailing_dots() -> None:
    assert terms("vr") == ["VR"]
    assert terms("Quanto é o Vr. por dia?") == ["VR"]
    assert terms("VR e vr e Vr") == ["VR"]  # deduplicated


def test_match_handles_ordinal_spellings() -> None:
    for text in ("quando cai o 13º?", "quando cai o 13o?", "quando cai o 13° salário?"):
        assert terms(text) == ["13º"]


def test_match_is_whole_word_only() -> None:
    assert terms("o homem do RH") == []
    assert terms("PJs e pjotinhas") == []


def test_multi_word_term_matches_with_space_or_hyphen_and_longest_wins() -> None:
    assert terms("auxílio home office") == ["home office"]
    assert terms("auxílio home-office") == ["home office"]
    assert terms("trabalho de home") == ["home"]


def test_term_never_matches_part_of_a_hyphenated_compound() -> None:
    entries = [GlossaryEntry("vale", "adiantamento salarial")]
    assert find_glossary_hits("qual o valor do vale-refeição?", entries) == []
    assert [h.term for h in find_glossary_hits("pedi um vale", entries)] == ["vale"]


def test_acronym_that_is_an_everyday_word_needs_capitals() -> None:
    assert terms("vou ir a uma reunião") == []
    assert terms("informe do IR e valor da UMA") == ["IR", "UMA"]


def test_hits_carry_area_and_source() -> None:
    hits = find_glossary_hits("VR", GLOSSARY, source="history")
    assert hits == [GlossaryHit("VR", "vale-refeição", "beneficios", "history")]


def test_expand_inserts_each_expansion_after_its_term() -> None:
    text = "regra do VR no home"
    expanded = expand_with_glossary(text, find_glossary_hits(text, GLOSSARY))
    assert expanded == "regra do VR (vale-refeição) no home (trabalho remoto)"


def test_expand_skips_an_expansion_already_in_the_text() -> None:
    text = "VR (vale-refeição) para PJ ou pessoa jurídica"
    expanded = expand_with_glossary(text, find_glossary_hits(text, GLOSSARY))
    assert expanded == text


def test_expand_adds_a_shared_expansion_once() -> None:
    text = "home office ou home"
    expanded = expand_with_glossary(text, find_glossary_hits(text, GLOSSARY))
    assert expanded == "home office (trabalho remoto) ou home"


def test_parse_object_form() -> None:
    assert parse_glossary_json({"VR": "vale-refeição", " PJ ": " pessoa jurídica "}) == [
        GlossaryEntry("VR", "vale-refeição"),
        GlossaryEntry("PJ", "pessoa jurídica"),
    ]


def test_parse_list_form_skips_inactive_entries() -> None:
    data = [
        {"term": "VR", "expansion": "vale-refeição", "area": "beneficios"},
        {"term": "VA", "expansion": "vale-alimentação", "active": False},
        {"term": "PJ", "expansion": "pessoa jurídica", "area": None, "active": True},
    ]
    assert parse_glossary_json(data) == [
        GlossaryEntry("VR", "vale-refeição", "beneficios"),
        GlossaryEntry("PJ", "pessoa jurídica"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("VR=vale-refeição", "must be an object"),
        (None, "must be an object"),
        ({"VR": ""}, "expansion must be a non-empty string"),
        ({"VR": 3}, "expansion must be a non-empty string"),
        ([["VR", "vale"]], "item 0 must be an object"),
        ([{"expansion": "vale"}], "'term' must be a non-empty string"),
        ([{"term": "VR"}], "'expansion' must be a non-empty string"),
        ([{"term": "VR", "expansion": "vale", "area": 1}], "'area' must be a string"),
        ([{"term": "VR", "expansion": "vale", "active": "no"}], "'active' must be true"),
    ],
)
def test_parse_rejects_bad_input_with_a_clear_message(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_glossary_json(data)


def test_json_round_trip() -> None:
    assert parse_glossary_json(glossary_to_json(GLOSSARY)) == list(GLOSSARY)


@given(st.text(), st.lists(st.tuples(st.text(min_size=1), st.text(min_size=1)), max_size=5))
def test_matching_and_expansion_never_raise(text: str, pairs: list[tuple[str, str]]) -> None:
    entries = [GlossaryEntry(term, expansion) for term, expansion in pairs] + list(GLOSSARY)
    hits = find_glossary_hits(text, entries)
    expanded = expand_with_glossary(text, hits)
    assert len(expanded) >= len(text)


def test_a_term_with_an_entry_in_the_turns_language_expands_to_that_one() -> None:
    """ "IRPF" is Brazil's income tax and Spain's: each turn gets its own language's entry;
    an entry of no language serves every turn whose language has none of its own."""
    from retrieval.pipeline.glossary import glossary_in_language

    entries = [
        GlossaryEntry("IRPF", "imposto de renda da pessoa física", "remuneracao", "pt"),
        GlossaryEntry("IRPF", "Impuesto sobre la Renta de las Personas Físicas", None, "es"),
        GlossaryEntry("irpf", "income tax", None, ""),
        GlossaryEntry("VR", "vale-refeição", None, ""),
    ]
    pt = glossary_in_language(entries, "pt")
    assert [e.expansion for e in pt] == ["imposto de renda da pessoa física", "vale-refeição"]
    es = find_glossary_hits("retención de IRPF", glossary_in_language(entries, "es"))
    assert [h.expansion for h in es] == ["Impuesto sobre la Renta de las Personas Físicas"]
    en = find_glossary_hits("IRPF rate", glossary_in_language(entries, "en"))
    assert [h.expansion for h in en] == ["income tax"]


def test_a_glossary_file_carries_each_entrys_language_and_refuses_a_bad_one() -> None:
    data = [
        {"term": "IRPF", "expansion": "imposto de renda", "language": "pt"},
        {"term": "IRPF", "expansion": "Impuesto sobre la Renta", "language": "ES"},
    ]
    parsed = parse_glossary_json(data)
    assert [(e.term, e.language) for e in parsed] == [("IRPF", "pt"), ("IRPF", "es")]
    assert parse_glossary_json(glossary_to_json(parsed)) == parsed
    with pytest.raises(ValueError, match="'language' must be a language code"):
        parse_glossary_json([{"term": "X", "expansion": "y", "language": "português!"}])
