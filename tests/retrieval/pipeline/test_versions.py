"""Current versions first, unless the question asks for an old one or names its year."""

from __future__ import annotations

from datetime import date

from retrieval.ingestion.services import version_fields
from retrieval.pipeline.filters import VersionAsk, prefer_current, version_ask
from retrieval.pipeline.fusion import Hit, merge_results
from retrieval.pipeline.types import SearchQuery

TODAY = date(2026, 12, 1)


def _hit(doc: str, title: str, chunk: int, **version: object) -> Hit:
    return Hit(chunk, chunk, doc, title, "", "", 0, "", chunk, chunk, 1.0 / chunk, **version)  # type: ignore[arg-type]


OLD = _hit("remote-2024", "Home office policy 2024", 1, superseded=True)
NEW = _hit("remote-2026", "Home office policy", 2, effective=date(2026, 1, 1))
MARKED = _hit("plr-2023", "Participação nos lucros 2023 (REVOGADA)", 3)


def _ids(hits: list[Hit], ask: VersionAsk) -> tuple[list[str], str]:
    merged = merge_results([SearchQuery("q", "normalize")], [hits])
    ranked, note = prefer_current(merged, ask)
    return [m.hit.external_id for m in ranked], note


def test_a_replaced_page_goes_after_the_current_one() -> None:
    ids, note = _ids([OLD, NEW], VersionAsk())
    assert ids == ["remote-2026", "remote-2024"]
    assert note.startswith("version: current pages first")
    # A title that says it was revoked counts as replaced too.
    assert _ids([MARKED, NEW], VersionAsk())[0] == ["remote-2026", "plr-2023"]


def test_asking_for_the_old_version_puts_it_first() -> None:
    asks = ("como era a política antiga de home office?", "la regla anterior", "the old policy")
    for text in asks:
        ask = version_ask([text], TODAY)
        assert ask.old, text
        assert _ids([NEW, OLD], ask)[0] == ["remote-2024", "remote-2026"]
    # "Antigo" describing something else asks nothing of versions.
    assert not version_ask(["troquei o celular antigo, como refaço o 2FA?"], TODAY).old


def test_a_year_is_a_checked_filter_on_the_pages_of_that_year() -> None:
    assert version_ask(["a regra de 2024"], TODAY) == VersionAsk(year=2024)
    # The current year asks nothing special; years out of range are no filter.
    assert version_ask(["a regra de 2026"], TODAY) == VersionAsk()
    assert version_ask(["o código 1234 e o ano 2999"], TODAY) == VersionAsk()
    ids, note = _ids([NEW, OLD], version_ask(["home office em 2024"], TODAY))
    assert ids == ["remote-2024", "remote-2026"] and note == "version: 2024's pages first"
    # By the effective date when the page has one.
    assert _ids([OLD, NEW], VersionAsk(year=2026))[0] == ["remote-2026", "remote-2024"]


def test_an_asked_version_moves_up_past_its_own_versions_only() -> None:
    """ "a PLR na política antiga": the replaced PLR page before the current PLR page; the
    replaced remote-work page, another subject, stays where the search put it."""
    plr = _hit("plr-2026", "Participação nos lucros e resultados — programa 2026", 1)
    remote_old = _hit("remote-2024", "Política de trabalho remoto — versão 2024 (REVOGADA)", 2)
    plr_old = _hit(
        "plr-2024", "Participação nos lucros e resultados — programa 2024 (SUBSTITUÍDO)", 3
    )
    ask = version_ask(["como era a PLR na política antiga?"], TODAY)
    ids, note = _ids([plr, remote_old, plr_old], ask)
    assert ids == ["plr-2024", "plr-2026", "remote-2024"]
    assert note.startswith("version: the question asks for an old one")
    # A year likewise lifts that year's page over its siblings, not over other subjects.
    vr = _hit("vr", "Vale-refeição", 1)
    remote_2024 = _hit("remote-2024b", "Política de trabalho remoto 2024", 2)
    assert _ids([vr, remote_2024], VersionAsk(year=2024)) == (["vr", "remote-2024b"], "")


def test_nothing_moves_without_versions() -> None:
    plain = [_hit("a", "Vale-refeição", 1), _hit("b", "Vale-transporte", 2)]
    assert _ids(plain, VersionAsk()) == (["a", "b"], "")


def test_front_matter_and_corpus_records_carry_versions() -> None:
    assert version_fields({"effective": "2026-01-01", "superseded_by": "pt/remoto-2026"}) == {
        "effective_date": date(2026, 1, 1),
        "superseded": True,
        "superseded_by": "pt/remoto-2026",
    }
    assert version_fields({"superseded": "sim"})["superseded"] is True
    assert version_fields({"superseded": True})["superseded"] is True
    # A date that does not parse is left out, never fatal.
    assert version_fields({"effective": "first of May"}) == {
        "effective_date": None,
        "superseded": False,
        "superseded_by": "",
    }


def test_a_page_titled_for_every_company_term_of_the_question_comes_first() -> None:
    """ "regra do VR no home": "VR" is "vale-refeição", "home" is "trabalho remoto"; the page
    titled for both comes before the meal allowance's general rule. One term alone names no
    subject ("o VA continua caindo durante a licença?") and moves nothing."""
    from retrieval.pipeline.filters import prefer_named_titles

    general = _hit("vr", "Vale-refeição — regra geral", 1)
    remote = _hit("vr-remote", "Vale-refeição no trabalho remoto", 2)
    merged = merge_results([SearchQuery("q", "normalize")], [[general, remote]])
    both = prefer_named_titles(merged, ["vale-refeição", "trabalho remoto"])
    assert [m.hit.external_id for m in both] == ["vr-remote", "vr"]
    one = prefer_named_titles(merged, ["vale-refeição"])
    assert [m.hit.external_id for m in one] == ["vr", "vr-remote"]
