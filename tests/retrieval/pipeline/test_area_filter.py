"""A department the turn places its question in ("no financeiro") is a preference: its
passages come first, and only a department of the reader's documents counts."""

from __future__ import annotations

from datetime import date

from retrieval.pipeline.filters import area_ask, prefer_areas, version_ask
from retrieval.pipeline.fusion import Hit, MergedHit

AREAS = ["rh", "financeiro", "ti", "juridico", "beneficios", "trabalho-remoto"]


def test_a_department_after_a_preposition_is_a_filter_in_any_of_its_names() -> None:
    assert area_ask(["como peço reembolso no financeiro?"], AREAS) == {"financeiro"}
    assert area_ask(["¿quién aprueba en RRHH?"], AREAS) == {"rh"}
    assert area_ask(["e na tesouraria, quem paga?"], AREAS) == {"financeiro"}
    assert area_ask(["who signs it in HR?"], AREAS) == {"rh"}
    assert area_ask(["what do I ask for in IT?"], AREAS) == {"ti"}
    assert area_ask(["e no jurídico?"], AREAS) == {"juridico"}
    # Named as the collection names it.
    assert area_ask(["en finanzas"], ["Financeiro"]) == {"Financeiro"}


def test_a_subject_a_common_word_or_an_unknown_department_is_no_filter() -> None:
    # The department as the subject: IT's supplies, not only IT's pages.
    assert area_ask(["o que a TI fornece pra quem tá no home?"], AREAS) == frozenset()
    # "in it" is no department, "in IT" is.
    assert area_ask(["is the laptop included in it?"], AREAS) == frozenset()
    # An area that is a subject ("trabalho-remoto") asks about the subject, not where.
    assert area_ask(["qual o valor do VR no trabalho remoto?"], AREAS) == frozenset()
    # A department the reader's documents do not have is not one they can name.
    assert area_ask(["como peço reembolso no financeiro?"], ["rh", "ti"]) == frozenset()
    assert area_ask(["no financeiro"], []) == frozenset()


def _merged(doc: str, area: str, score: float) -> MergedHit:
    hit = Hit(len(doc), len(doc), doc, doc, "", "", 0, area, 1, 1, score)
    return MergedHit(hit=hit, score=score)


def test_the_departments_passages_come_first_and_the_rest_keep_their_order() -> None:
    merged = [
        _merged("viagens", "rh", 0.9),
        _merged("reembolso", "financeiro", 0.8),
        _merged("ferias", "rh", 0.7),
        _merged("cartao", "financeiro", 0.6),
    ]
    ranked = [m.hit.external_id for m in prefer_areas(merged, frozenset({"financeiro"}))]
    assert ranked == ["reembolso", "cartao", "viagens", "ferias"]
    assert prefer_areas(merged, frozenset()) == merged


def test_last_year_is_a_year_counted_from_today() -> None:
    today = date(2026, 12, 2)
    assert version_ask(["como era a regra do ano passado?"], today).year == 2025
    assert version_ask(["¿cuánto era el bono el año pasado?"], today).year == 2025
    assert version_ask(["what was the allowance last year?"], today).year == 2025
    # Without the reader's date there is no year to count from.
    assert version_ask(["como era a regra do ano passado?"], None).year is None
