"""The vocabulary statistics a reader gets count only what they may read (issue 14, finding 1).

The attack: as a plain employee, ask with a misspelling ("dosie") and read the `rewrite`
frame's corrections ("dossie", a word of a restricted document only); or watch which
words are "known". Each document-group set has its own counts, and a reader's sum the sets
they may read: public plus their groups.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from retrieval.models import Document, VocabularyTerm
from retrieval.pipeline.search import Scope
from retrieval.services import (
    VocabularyLexicon,
    scope_for_user,
    search_engine,
    vocabulary_df,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Words that only the restricted salary table uses, and a misspelling of each.
RESTRICTED_ONLY = {"confidencial": "confidencal", "desenvolvedor": "desenvolvedr"}


def _lexicon(user: Any, collection: Any) -> VocabularyLexicon:
    scope = scope_for_user(user=user, collection=collection)
    return VocabularyLexicon(search_engine(), collection.id, scope=scope)


def test_misspelling_is_never_corrected_to_a_restricted_word(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    typos = set(RESTRICTED_ONLY.values())
    for name in ("ana", "carlos"):
        view = _lexicon(personas[name], small_kb)(typos | set(RESTRICTED_ONLY))
        assert not set(view.corrections.values()) & set(RESTRICTED_ONLY), (name, view.corrections)
        assert not set(view.df) & set(RESTRICTED_ONLY), (name, view.df)
    # The group member gets them: the statistics are filtered, not dropped.
    view = _lexicon(personas["rita"], small_kb)(typos)
    assert view.corrections == {typo: word for word, typo in RESTRICTED_ONLY.items()}


def test_counts_sum_only_the_readable_group_sets(small_kb: Any, personas: dict[str, Any]) -> None:
    ana = _lexicon(personas["ana"], small_kb)({"salario", "reajuste", "ferias"})
    rita = _lexicon(personas["rita"], small_kb)({"salario", "reajuste", "ferias"})
    everything = VocabularyLexicon(
        search_engine(), small_kb.id, scope=Scope(collection_id=small_kb.id, see_everything=True)
    )({"salario", "reajuste", "ferias"})
    restricted = Document.objects.get(external_id="pt/faixas-salariais-2026")
    restricted_chunks = restricted.chunks.count()
    assert restricted_chunks > 0
    assert ana.n_chunks + restricted_chunks == rita.n_chunks == everything.n_chunks
    assert "reajuste" not in ana.df and rita.df["reajuste"] == everything.df["reajuste"]
    assert ana.df["ferias"] == rita.df["ferias"]  # no restricted chunk says it
    # A word in both: the employee's count leaves the restricted chunks out.
    assert ana.df.get("salario", 0) < rita.df["salario"]
    # The admin's glossary suggestions read the same counts.
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    assert vocabulary_df(scope=scope, words=["reajuste", "ferias"]) == {"ferias": ana.df["ferias"]}


def test_lexicon_without_a_scope_reads_public_documents_only(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    bare = VocabularyLexicon(search_engine(), small_kb.id)(set(RESTRICTED_ONLY.values()))
    assert bare.corrections == {}


def test_changing_a_documents_groups_moves_its_words(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    from retrieval.ingestion.services import document_set_groups

    restricted = Document.objects.get(external_id="pt/faixas-salariais-2026")
    document_set_groups(document=restricted, group_names=[])
    assert "confidencial" in _lexicon(personas["ana"], small_kb)({"confidencial"}).df
    document_set_groups(document=restricted, group_names=["rh-restrito"])
    assert "confidencial" not in _lexicon(personas["ana"], small_kb)({"confidencial"}).df
    rows = VocabularyTerm.objects.filter(word="confidencial")
    assert [r.group_ids for r in rows] == [[personas["rita"].groups.get().id]]


def test_spelling_is_taken_from_the_readers_collection_only() -> None:
    # The trigram index holds every collection's words: the candidates it finds are cut to the
    # reader's collection before the closest is chosen, so a closer word elsewhere never wins.
    from retrieval.models import Collection

    company = Collection.objects.create(slug="company-words", name="Company")
    other = Collection.objects.create(slug="other-words", name="Other")
    VocabularyTerm.objects.create(collection=company, word="reembolso", df=4)
    VocabularyTerm.objects.create(collection=company, word="ferias", df=9)
    VocabularyTerm.objects.create(collection=other, word="reembolzos", df=50)
    typo = "reembolzo"

    def lexicon(collection: Any) -> Any:
        scope = Scope(collection_id=collection.id, see_everything=True)
        return VocabularyLexicon(search_engine(), collection.id, scope=scope)

    view = lexicon(company)({typo, "ferias", "salario"})
    assert view.corrections == {typo: "reembolso"}
    # The known words' counts and the correction's, and nothing of the other collection.
    assert view.df == {"ferias": 9, "reembolso": 4}
    view = lexicon(other)({typo, "ferias"})
    assert view.corrections == {typo: "reembolzos"}
    assert view.df == {"reembolzos": 50}


@pytest.mark.parametrize("max_words", [10_000, 3])
def test_statistics_kept_between_turns_are_those_of_a_fresh_lookup(
    small_kb: Any, personas: dict[str, Any], monkeypatch: pytest.MonkeyPatch, max_words: int
) -> None:
    # A turn looks up its history's words again: they come from the cache, the new ones from
    # the database, and the two together are what one lookup of all of them gives (also when
    # the cache is full and starts over).
    from retrieval import services

    monkeypatch.setattr(services, "_KNOWN_MAX_WORDS", max_words)
    earlier = {"ferias", "reembolso", "despezas", "salario", "feriaz"}
    now = {"ferias", "vale", "refeicao", "reembolzo", "xyzw", "desenvolvedr"}
    for name in ("ana", "rita"):
        services._known.clear()
        fresh = _lexicon(personas[name], small_kb)(earlier | now)
        services._known.clear()
        _lexicon(personas[name], small_kb)(earlier)
        kept = _lexicon(personas[name], small_kb)(earlier | now)
        assert kept == fresh, name
        assert fresh.corrections and fresh.df, name
    # Each reader's statistics are kept apart: Ana's, kept first, leave Rita's correction in.
    services._known.clear()
    ana = _lexicon(personas["ana"], small_kb)(now)
    rita = _lexicon(personas["rita"], small_kb)(now)
    assert "desenvolvedr" not in ana.corrections
    assert rita.corrections["desenvolvedr"] == "desenvolvedor"


def test_a_readers_full_text_ranking_ignores_documents_they_cannot_read(
    small_kb: Any, personas: dict[str, Any]
) -> None:
    """The attack: a plain employee's sources (the playground's full-text ranks too) came in
    another order once a restricted page repeating one of the question's words was uploaded,
    and back when it was deleted: the words' rarity counted chunks the reader cannot open."""
    from retrieval.documents import documents_delete
    from retrieval.pipeline.search import SearchRequest
    from retrieval.services import search_params

    params = replace(search_params(), legs="text")
    # Words of public pages that the restricted salary table uses as well ("salario", "dias").
    request = SearchRequest("salário das férias em dias úteis de trabalho remoto", [])
    scope = scope_for_user(user=personas["ana"], collection=small_kb)
    engine = search_engine()

    def ranking() -> list[tuple[int, float]]:
        return [(h.chunk_id, round(h.score, 9)) for h in engine.search(request, scope, params)]

    before = ranking()
    assert before
    documents_delete(documents=Document.objects.filter(external_id="pt/faixas-salariais-2026"))
    assert ranking() == before


def test_a_word_longer_than_any_word_of_the_corpus_is_not_looked_up(
    small_kb: Any, personas: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,990 copies of U+FDFA are one 71,820-character word once folded; its pg_trgm
    similarity against the vocabulary took 13.6 s (issue 38, finding 2)."""
    looked_up: list[str] = []
    original = VocabularyLexicon._look_up

    def spy(self: VocabularyLexicon, conn: Any, words: list[str]) -> Any:
        looked_up.extend(words)
        return original(self, conn, words)

    monkeypatch.setattr(VocabularyLexicon, "_look_up", spy)
    huge = "ﷺ" * 3990
    view = _lexicon(personas["ana"], small_kb)({huge, "ferias", "a" * 65})
    assert looked_up == ["ferias"]
    assert huge not in view.df and huge not in view.corrections
