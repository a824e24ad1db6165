"""A country the turn fixes is a preference the looser queries cannot outvote."""

from __future__ import annotations

from retrieval.pipeline.filters import prefer_countries, turn_countries
from retrieval.pipeline.fusion import Hit, merge_results
from retrieval.pipeline.types import SearchQuery


def _hit(doc: str, title: str, chunk: int) -> Hit:
    return Hit(chunk, chunk, doc, title, "", "", 0, "", chunk, chunk, 1.0 / chunk)


SPAIN = _hit("es-vac", "Vacaciones — España", 1)
HOME = _hit("pt-ferias", "Férias: aquisição e agendamento", 2)
CHILE = _hit("cl-vac", "Vacaciones y feriado legal — Chile", 3)


def test_a_country_after_a_locative_preposition_is_a_filter_in_any_of_its_names() -> None:
    queries = [SearchQuery("vacaciones renuncio en Chile", "expand")]
    assert turn_countries(queries) == {"chile"}
    assert turn_countries([SearchQuery("quanto é o VA no Uruguai?", "normalize")]) == {"uruguai"}
    assert turn_countries([SearchQuery("per diem in the United States", "normalize")]) == {"usa"}


def test_a_destination_or_a_place_of_work_is_no_filter() -> None:
    # Where someone travels or works from: their own country's page answers.
    for text in (
        "cuánto es el viático para ir a Brasil?",
        "posso trabalhar remoto do Uruguai por 2 semanas?",
        "vou pra Buenos Aires a trabalho",
        "Brasil",
    ):
        assert turn_countries([SearchQuery(text, "normalize")]) == frozenset(), text


def test_a_country_whose_rule_or_company_part_is_asked_about_is_a_filter() -> None:
    # "do"/"de" after a rule or an office: that country's rule ("trabalhar remoto do
    # Uruguai", above, is where someone works from).
    for text, country in (
        ("a política de brindes do Uruguai tem limite de valor?", "uruguai"),
        ("las reglas de España para vacaciones", "espana"),
        ("os colaboradores da filial do Chile ganham VA?", "chile"),
    ):
        assert turn_countries([SearchQuery(text, "normalize")]) == {country}, text
    assert turn_countries([SearchQuery("vim do Chile, tenho direito?", "normalize")]) == set()


def test_the_countrys_pages_come_first_and_other_countries_last() -> None:
    queries = [SearchQuery("vacaciones en Chile", "expand")]
    merged = merge_results(queries, [[SPAIN, HOME, CHILE]])
    ranked = prefer_countries(merged, turn_countries(queries))
    assert [m.hit.external_id for m in ranked] == ["cl-vac", "pt-ferias", "es-vac"]


def test_without_a_country_nothing_moves() -> None:
    merged = merge_results([SearchQuery("férias", "normalize")], [[SPAIN, HOME, CHILE]])
    assert prefer_countries(merged, frozenset()) == merged
    home_only = merge_results([SearchQuery("férias", "normalize")], [[HOME, SPAIN]])
    # Another country's page still goes behind one that names no country.
    assert prefer_countries(home_only, frozenset({"chile"})) == home_only


def test_a_carried_country_counts_when_the_earlier_question_placed_it() -> None:
    contextual = SearchQuery("si renuncio antes vacaciones Chile", "expand", reading="contextual")
    earlier = ["¿cuántos días de vacaciones tengo en Chile?"]
    assert turn_countries([contextual], earlier) == {"chile"}
    # Not when the earlier question only travelled there, nor for the user's own words.
    assert turn_countries([contextual], ["quanto é a diária para ir a Chile?"]) == frozenset()
    plain = SearchQuery("si renuncio antes vacaciones Chile", "normalize")
    assert turn_countries([plain], earlier) == frozenset()


def test_the_cases_a_text_is_about_are_named_alike_in_every_language() -> None:
    from retrieval.pipeline.rewrite_rules.slots import cases_in
    from retrieval.pipeline.text import token_spans

    def cases(text: str) -> dict[str, frozenset[str]]:
        return cases_in(token_spans(text))

    assert cases("licencia por paternidad") == cases("licença-paternidade")
    assert cases("licença-maternidade") == {"parent": frozenset({"mother"})}
    assert (
        cases("viagem pra Montevidéu")
        == cases("viaje a Uruguay")
        == {"place": frozenset({"uruguai"})}
    )
    assert cases("vou pra Buenos Aires") == cases("voy a Argentina")
    assert cases("e se for pra fora do país?") == cases("viagens internacionais")
    assert cases("viagens nacionais") == {"scope": frozenset({"home"})}
    assert cases("meus pais moram comigo") == {}  # "pais" is no father once accents go
