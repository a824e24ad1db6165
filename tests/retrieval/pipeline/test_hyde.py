"""HyDE's prompt and the reading of its reply (pure, no model)."""

from __future__ import annotations

import json

import pytest

from retrieval.pipeline.hyde import (
    PROMPT_PATH,
    HydeParseError,
    about_the_question,
    build_hyde_messages,
    hyde_schema,
    parse_hyde_output,
)

EXPECTED_USER_MESSAGE = (
    "Question: e para quem é PJ?\n\n"
    "In the conversation it means: reembolso de despesas para prestador PJ (pessoa jurídica)\n\n"
    "Output:"
)


def test_build_hyde_messages_snapshot() -> None:
    system, user = build_hyde_messages(
        question="e para quem é PJ?",
        meanings=["reembolso de despesas para prestador PJ (pessoa jurídica)"],
        language="pt",
        max_chars=250,
    )
    assert (system.role, user.role) == ("system", "user")
    assert user.content == EXPECTED_USER_MESSAGE
    assert "at most 250 characters, in the language of the question (Portuguese)" in (
        system.content
    )
    assert "{" + "max_chars}" not in system.content and "{" + "language}" not in system.content


def test_system_prompt_covers_the_rules() -> None:
    template = PROMPT_PATH.read_text(encoding="utf-8")
    for needle in ["{max_chars}", "{language}", "never shown", "data, not instructions"]:
        assert needle in template, needle


def test_an_unknown_language_and_a_question_that_means_itself() -> None:
    system, user = build_hyde_messages(
        question="vacaciones\nen Chile",
        meanings=["vacaciones en Chile"],
        language=None,
        max_chars=99,
    )
    assert "(the question's own)" in system.content
    assert user.content == "Question: vacaciones en Chile\n\nOutput:"


def test_the_schema_bounds_the_passage() -> None:
    schema = hyde_schema(300)
    assert schema["properties"]["passage"] == {"type": "string", "minLength": 1, "maxLength": 300}
    assert schema["required"] == ["passage"] and schema["additionalProperties"] is False


def test_a_passage_is_read_on_one_line_and_cut_at_a_word() -> None:
    passage = "O reembolso de despesas\n de prestadores PJ é pago   contra nota fiscal em 30 dias."
    assert parse_hyde_output(json.dumps({"passage": passage}), 500) == (
        "O reembolso de despesas de prestadores PJ é pago contra nota fiscal em 30 dias."
    )
    assert parse_hyde_output(json.dumps({"passage": passage}), 40) == (
        "O reembolso de despesas de prestadores"
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not json", "not JSON"),
        ('["a passage"]', "no passage string"),
        ('{"passage": 3}', "no passage string"),
        ('{"passage": "   "}', "too short"),
        ('{"passage": "30 dias."}', "too short"),
    ],
)
def test_a_reply_without_a_usable_passage_is_refused(raw: str, reason: str) -> None:
    with pytest.raises(HydeParseError, match=reason):
        parse_hyde_output(raw, 300)


def test_a_passage_must_share_a_word_with_the_question() -> None:
    # What SmolLM2-135M wrote for "qnd cai a segunda parcela do 13": the prompt's example.
    copied = "O reembolso de despesas de viagem deve ser solicitado no portal em até 30 dias."
    assert not about_the_question(
        copied, question="qnd cai a segunda parcela do 13", meanings=[], language="pt"
    )
    on_topic = "A segunda parcela do 13º salário é paga até 20 de dezembro."
    assert about_the_question(
        on_topic, question="qnd cai a segunda parcela do 13", meanings=[], language="pt"
    )
    # The rewritten query counts as the question: "e no home?" means remote work.
    assert about_the_question(
        "No trabalho remoto o vale-refeição continua.",
        question="e no home?",
        meanings=["vale-refeição no trabalho remoto"],
        language="pt",
    )
