"""A language the chat knows is a data file: a fourth one, added in a folder of
CHATRAG_LANGUAGE_DIRS, is detected, stemmed, its stop words dropped, its personal data masked,
its follow-ups read by its own cue words and its turns searched.

The language files are read once per process, so the fourth language runs in a subprocess
with the variable set, through the pipeline's one entry point (`plan_turn`) on a fake search.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval.pipeline.languages import FOLDER, LanguageDataError, language_codes
from retrieval.pipeline.text import LANGUAGES, detect_language, stem

ROOT = Path(__file__).resolve().parents[3]

# Italian, written for this test: the words a file needs, no more.
ITALIAN = {
    "precedence": 4,
    "snowball": "italian",
    "spelling_dictionary": "it",
    "detect": {"letters": "", "suffixes": ["zione", "zioni"]},
    "stemming": {"before": [], "plural_fold": False, "after": []},
    "cues": {
        "anaphors": ["questo", "questa", "quello", "quella", "esso", "essa"],
        "openers": ["e", "e per", "e se"],
        "hypothetical": ["se"],
        "question_starters": ["come", "quanto", "quanti", "quando", "dove", "chi", "posso"],
        "conjunctions": ["e"],
        "articles": ["il", "lo", "la", "i", "gli", "le", "un", "una"],
    },
    "small_talk_replies": {
        "thanks": "Prego! Per un'altra domanda, chieda pure.",
        "greeting": "Buongiorno! Come posso aiutarla?",
        "farewell": "Arrivederci!",
        "ack": "Va bene.",
    },
    "ask_which": {"template": "Intende {}?", "last_separator": " o "},
    "ask_for_details": "Può dirmi di più? Di quale argomento si tratta?",
    "ask_for_the_topic_out_of_sight": "Non vedo l'inizio della conversazione: di cosa si tratta?",
    "stop_words": {
        "common": [
            "il",
            "lo",
            "la",
            "i",
            "gli",
            "le",
            "un",
            "una",
            "di",
            "del",
            "della",
            "delle",
            "dei",
            "per",
            "con",
            "su",
            "e",
            "o",
            "che",
            "mi",
            "ho",
            "ha",
            "sono",
            "quanti",
            "quanto",
            "come",
            "quando",
            "dove",
            "posso",
            "al",
            "alla",
            "nel",
            "nella",
            "a",
            "in",
            "da",
        ],
        "fillers": ["vorrei", "sapere", "scusi", "grazie"],
    },
    "identifier_labels": ["matricola", "numero di matricola"],
    "small_talk_words": {"thanks": ["grazie", "grazie mille"], "greeting": ["buongiorno"]},
    "request_words": ["spiegami"],
    # Its own name of a country the other files know, a country and a city of its own.
    "places": {
        "countries": {"espana": ["Spagna"], "svizzera": ["Svizzera"]},
        "cities": {"svizzera": ["Zurigo"]},
    },
    "filters": {"locative": ["in"]},
    "slots": {"audience": ["dipendente", "dipendenti"]},
}

_RUN_A_TURN = """
import asyncio, json, sys
from retrieval.pipeline.fusion import Hit
from retrieval.pipeline.plan import TurnBackends, TurnRequest, plan_turn, turn_language
from retrieval.pipeline.retrieve import RetrievalSettings
from retrieval.pipeline.rewrite_rules.slots import countries_in, places_in, slot_of
from retrieval.pipeline.search import Scope
from retrieval.pipeline.text import LANGUAGES, content_terms, stem, token_spans
from retrieval.pipeline.types import HistoryMessage, LexiconView
from tests.fakes import FakeSearcher

HOLIDAYS = Hit(1, 1, "ferie", "Ferie annuali", "", "Ogni dipendente ha 26 giorni di ferie", 0,
               "", 1, 1, 0.1)

def run(question, history=()):
    language = turn_language(question, history, explicit=None, default="pt")
    request = TurnRequest(question=question, history=history, scope=Scope(collection_id=1),
                          glossary=(), settings=RetrievalSettings(mode="rules"),
                          language=language, default_language="pt")
    searcher = FakeSearcher(lambda r: [HOLIDAYS])
    backends = TurnBackends(searcher=searcher, embedder=None, lexicon=lambda w: LexiconView())
    plan = asyncio.run(plan_turn(request, backends))
    return {"language": language, "kind": plan.kind, "reply": plan.reply,
            "masked": plan.outcome.masked_question,
            "searched": [r.text for r in searcher.requests],
            "rules": [f.id for f in plan.outcome.rewrite.fired]}

first = run("Vorrei sapere quanti giorni di ferie ho, la mia matricola è 4481297 "
            "e la mia e-mail mario.rossi@example.it")
history = (HistoryMessage("user", "quanti giorni di ferie ho all'anno?"),
           HistoryMessage("assistant", "Ogni dipendente ha 26 giorni di ferie [1]."))
follow = run("e per i collaboratori esterni?", history)
thanks = run("grazie mille!")
spain = run("quanti giorni di ferie ho in Spagna?")
print(json.dumps({"languages": list(LANGUAGES), "first": first, "follow": follow,
                  "thanks": thanks, "spain": spain,
                  "countries": sorted(countries_in(token_spans("ferie in Svizzera o Spagna"))),
                  "places": sorted(places_in(token_spans("ferie a Zurigo"))),
                  "slot": slot_of("dipendenti"),
                  "terms": content_terms("vorrei sapere delle ferie", "it"),
                  "stems": [stem("giorni", "it"), stem("giorno", "it")]}))
"""


def _turn_in_a_fourth_language(folder: Path) -> dict[str, object]:
    env = {**os.environ, "CHATRAG_LANGUAGE_DIRS": str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", _RUN_A_TURN],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_fourth_language_file_is_detected_masked_and_searched(tmp_path: Path) -> None:
    (tmp_path / "it.json").write_text(json.dumps(ITALIAN), encoding="utf-8")
    result = _turn_in_a_fourth_language(tmp_path)

    assert result["languages"] == ["pt", "es", "en", "it"]
    first = result["first"]
    assert isinstance(first, dict)
    assert first["language"] == "it" and first["kind"] == "answer"
    # The labelled number and the e-mail never reach a query.
    assert "4481297" not in first["masked"] and "mario.rossi" not in first["masked"]
    assert all("4481297" not in q and "mario.rossi" not in q for q in first["searched"])
    assert any("ferie" in q for q in first["searched"])
    # Italian stop words and fillers are not topic words; Snowball's Italian stemmer runs.
    assert result["terms"] == ["ferie"]
    stems = result["stems"]
    assert isinstance(stems, list) and stems[0] == stems[1]
    # A follow-up opened by the file's own opener carries the conversation's topic.
    follow = result["follow"]
    assert isinstance(follow, dict) and follow["language"] == "it"
    assert any("ferie" in q and "collaboratori" in q for q in follow["searched"])
    # Its thanks are small talk, answered in Italian without a search.
    thanks = result["thanks"]
    assert isinstance(thanks, dict) and thanks["kind"] == "small_talk"
    assert thanks["reply"] == "Prego! Per un'altra domanda, chieda pure." and not thanks["searched"]


def test_a_fourth_language_file_adds_its_own_places_and_slot_values(tmp_path: Path) -> None:
    (tmp_path / "it.json").write_text(json.dumps(ITALIAN), encoding="utf-8")
    result = _turn_in_a_fourth_language(tmp_path)

    # Its name of a country the other files know is that country, named in their languages
    # in the query and preferred by the country filter; its own country and city are known.
    spain = result["spain"]
    assert isinstance(spain, dict) and spain["language"] == "it"
    assert any("Spagna (Espanha España Spain)" in q for q in spain["searched"])
    assert {"place_names", "country"} <= set(spain["rules"])
    assert result["countries"] == ["espana", "svizzera"]
    assert result["places"] == ["svizzera"]
    # A value of its own for a slot that a follow-up may replace ("e per i dipendenti?").
    assert result["slot"] == "audience"


def test_without_the_variable_the_chat_knows_its_three_languages() -> None:
    assert LANGUAGES == language_codes(FOLDER) == ("pt", "es", "en")
    assert detect_language("quanto custa a coparticipação?") == "pt"
    assert detect_language("¿cuánto cuesta el copago?") == "es"
    assert stem("viagens", "pt") == stem("viagem", "pt")
    assert stem("descuenta", "es") == stem("descontar", "es")


def test_a_language_file_with_a_bad_name_or_folder_says_which(tmp_path: Path) -> None:
    from retrieval.pipeline.languages import language_files

    (tmp_path / "italian.json").write_text("{}", encoding="utf-8")
    with pytest.raises(LanguageDataError, match="named by its code"):
        language_files(tmp_path)
    with pytest.raises(LanguageDataError, match="not there"):
        language_files(tmp_path / "missing")


def test_a_default_language_without_a_file_fails_the_system_check(settings: object) -> None:
    from retrieval.apps import check_languages

    settings.CHATRAG_DEFAULT_LANGUAGE = "es"  # type: ignore[attr-defined]
    assert check_languages() == []
    settings.CHATRAG_DEFAULT_LANGUAGE = "it"  # type: ignore[attr-defined]
    (error,) = check_languages()
    assert error.id == "retrieval.E002" and "CHATRAG_LANGUAGE_DIRS" in error.msg
