"""The phrases the chat says without a model come from one data file per language."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval.pipeline.ask_phrases import clarification_question
from retrieval.pipeline.languages import FOLDER, LanguageDataError, phrases, phrases_load
from retrieval.pipeline.rewrite_rules.smalltalk import small_talk_reply


def test_each_product_language_has_a_complete_file() -> None:
    for language in ("pt", "es", "en"):
        loaded = phrases_load(FOLDER / f"{language}.json")
        assert {"thanks", "greeting", "farewell", "ack"} <= loaded.small_talk_replies.keys()
        assert loaded.ask_for_details and loaded.ask_for_the_topic_out_of_sight


def test_the_replies_and_questions_read_the_turns_language_file() -> None:
    spanish = phrases_load(FOLDER / "es.json")
    assert small_talk_reply("thanks", "es") == spanish.small_talk_replies["thanks"]
    assert small_talk_reply("chat", "es") == spanish.small_talk_replies["ack"]
    assert clarification_question(["A", "B", "C"], "en") == "Do you mean A, B or C?"
    # A language without a file speaks Portuguese.
    assert small_talk_reply("thanks", "de") == small_talk_reply("thanks", "pt")


def test_a_fourth_language_is_a_file_of_its_own(tmp_path: Path) -> None:
    data = json.loads((FOLDER / "en.json").read_text(encoding="utf-8"))
    data["small_talk_replies"]["thanks"] = "Gern geschehen!"
    data["ask_which"] = {"template": "Meinen Sie {}?", "last_separator": " oder "}
    (tmp_path / "de.json").write_text(json.dumps(data), encoding="utf-8")
    german = phrases("de", tmp_path)
    assert german.small_talk_replies["thanks"] == "Gern geschehen!"
    assert german.ask_which == ("Meinen Sie {}?", " oder ")
    assert phrases("fr", tmp_path) == phrases("pt")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("not json", "not a language file"),
        ('{"small_talk_replies": {}}', "not a language file"),
        (
            json.dumps(
                {
                    "small_talk_replies": {"ack": "ok"},
                    "ask_which": {"template": "which?", "last_separator": " or "},
                    "ask_for_details": "?",
                    "ask_for_the_topic_out_of_sight": "?",
                }
            ),
            "has no {} for the options",
        ),
    ],
)
def test_a_broken_language_file_says_which_and_why(
    tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "xx.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LanguageDataError, match=reason.replace("{}", r"\{\}")) as info:
        phrases_load(path)
    assert str(path) in str(info.value)


def test_the_stop_words_are_the_language_files_lists(tmp_path: Path) -> None:
    from retrieval.pipeline.languages import stop_words
    from retrieval.pipeline.text import STOPWORDS, content_terms

    assert "quero" in stop_words("pt") and "the" in stop_words("en")  # a filler, a common word
    assert STOPWORDS["es"] == frozenset(stop_words("es"))
    assert content_terms("quero saber das férias", "pt") == ["ferias"]
    data = json.loads((FOLDER / "en.json").read_text(encoding="utf-8"))
    data["stop_words"] = {"common": ["der", "die", "das"], "fillers": ["bitte"]}
    (tmp_path / "de.json").write_text(json.dumps(data), encoding="utf-8")
    assert stop_words("de", tmp_path) == ("der", "die", "das", "bitte")
    assert stop_words("fr", tmp_path) == ()


def test_the_small_talk_kinds_and_request_words_are_the_language_files_lists(
    tmp_path: Path,
) -> None:
    from retrieval.pipeline.languages import request_words, small_talk_words

    kinds = small_talk_words()
    assert set(kinds) == {"thanks", "greeting", "farewell", "ack"}
    assert {"obrigado", "gracias", "thanks"} <= set(kinds["thanks"])  # every language at once
    assert "dime" in request_words() and "explain" in request_words()
    (tmp_path / "de.json").write_text(
        json.dumps({"small_talk_words": {"thanks": ["danke"]}, "request_words": ["erkläre"]}),
        encoding="utf-8",
    )
    assert small_talk_words(tmp_path) == {"thanks": ("danke",)}
    assert request_words(tmp_path) == ("erkläre",)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "de.json").write_text(
        json.dumps({"small_talk_words": {"thanks": "danke"}}), encoding="utf-8"
    )
    with pytest.raises(LanguageDataError, match="small_talk_words"):
        small_talk_words(broken)
