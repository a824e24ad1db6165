"""Conversation services (write side) and selectors (read side, always scoped to the owner)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.http import Http404

from conversations.models import Conversation, Feedback, Message
from conversations.selectors import (
    conversation_get,
    conversation_list,
    document_readable,
    feedback_values,
    history_before,
    message_get,
)
from conversations.services import (
    InvalidMessage,
    clean_user_text,
    conversation_create,
    conversation_delete,
    feedback_set,
    message_store_user,
    title_from_text,
)
from retrieval.services import default_collection

# --- clean_user_text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("  quantos dias de férias?  ", "quantos dias de férias?"),
        ("a\x00b\x07c\x1bd\x7f", "abcd"),  # C0 controls and DEL
        ("zero\u200bwidth \u202eflip\u2066", "zerowidth flip"),  # format characters
        ("linha 1\nlinha 2\tcoluna", "linha 1\nlinha 2\tcoluna"),  # newlines and tabs stay
        ("Windows\r\nline", "Windows\nline"),
        ("ñ ç ü ã 😀 €", "ñ ç ü ã 😀 €"),
        ("\ud800lone surrogate", "lone surrogate"),
    ],
)
def test_clean_user_text_strips_what_is_not_printable(raw: str, cleaned: str) -> None:
    assert clean_user_text(raw, max_chars=100) == cleaned


@pytest.mark.parametrize("raw", [None, 42, 4.2, b"bytes", ["text"], {"text": "x"}, True])
def test_clean_user_text_refuses_what_is_not_text(raw: object) -> None:
    with pytest.raises(InvalidMessage, match="must be text"):
        clean_user_text(raw, max_chars=100)


@pytest.mark.parametrize("raw", ["", "   ", "\n\t \n", "\x00\x01\x02", "\u200b\u200c"])
def test_clean_user_text_refuses_empty_messages(raw: str) -> None:
    with pytest.raises(InvalidMessage, match="empty"):
        clean_user_text(raw, max_chars=100)


def test_clean_user_text_limit_counts_the_cleaned_text() -> None:
    assert clean_user_text("x" * 10, max_chars=10) == "x" * 10
    assert clean_user_text("  " + "x" * 10 + "\x00" * 20 + "  ", max_chars=10) == "x" * 10
    with pytest.raises(InvalidMessage, match=r"too long \(11 > 10"):
        clean_user_text("x" * 11, max_chars=10)


def test_title_from_text_flattens_and_cuts_at_a_word() -> None:
    assert title_from_text("  férias\n\nno   Natal ") == "férias no Natal"
    long = "posso vender parte das minhas férias e receber o abono pecuniário junto com o salário?"
    title = title_from_text(long)
    assert len(title) <= 60
    assert title.endswith("…")
    assert long.startswith(title[:-1])
    assert title[-2] != " " and long[len(title) - 1] == " "  # cut at a word boundary
    assert len(title_from_text("x" * 200)) == 60


# --- message_store_user ---------------------------------------------------------------------------


def test_message_store_user_stores_received_and_titles_the_conversation(
    personas: dict[str, Any],
) -> None:
    conversation = conversation_create(user=personas["ana"])
    assert conversation.title == ""
    before = conversation.updated_at
    first = message_store_user(conversation=conversation, text="Quantos dias de férias eu tenho?")
    assert (first.role, first.status, first.text) == (
        Message.Role.USER,
        Message.Status.RECEIVED,
        "Quantos dias de férias eu tenho?",
    )
    conversation.refresh_from_db()
    assert conversation.title == "Quantos dias de férias eu tenho?"
    assert conversation.updated_at > before

    message_store_user(conversation=conversation, text="e no Natal?")
    conversation.refresh_from_db()
    assert conversation.title == "Quantos dias de férias eu tenho?"  # the first message names it
    assert list(conversation.messages.values_list("text", flat=True)) == [
        "Quantos dias de férias eu tenho?",
        "e no Natal?",
    ]


def test_message_store_user_keeps_a_title_given_by_the_user(personas: dict[str, Any]) -> None:
    conversation = conversation_create(user=personas["ana"], title="Minhas férias")
    message_store_user(conversation=conversation, text="quantos dias?")
    conversation.refresh_from_db()
    assert conversation.title == "Minhas férias"


# --- feedback_set ---------------------------------------------------------------------------------


def _answer(user: User, text: str = "Você tem 30 dias [1].") -> Message:
    conversation = conversation_create(user=user)
    question = message_store_user(conversation=conversation, text="quantos dias de férias?")
    return Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, text=text, reply_to=question
    )


@pytest.mark.parametrize("value", [0, 2, -2, 10])
def test_feedback_set_accepts_only_up_or_down(personas: dict[str, Any], value: int) -> None:
    answer = _answer(personas["ana"])
    with pytest.raises(InvalidMessage, match="1 or -1"):
        feedback_set(message=answer, user=personas["ana"], value=value)
    assert not Feedback.objects.exists()


def test_feedback_set_applies_to_answers_only(personas: dict[str, Any]) -> None:
    question = _answer(personas["ana"]).reply_to
    assert question is not None
    with pytest.raises(InvalidMessage, match="answers only"):
        feedback_set(message=question, user=personas["ana"], value=1)
    assert not Feedback.objects.exists()


def test_feedback_set_records_then_changes_one_vote(personas: dict[str, Any]) -> None:
    answer = _answer(personas["ana"])
    up = feedback_set(message=answer, user=personas["ana"], value=1)
    assert (up.value, up.reason) == (1, "")
    down = feedback_set(
        message=answer, user=personas["ana"], value=-1, reason="  citou o documento errado  "
    )
    assert down.pk == up.pk
    assert Feedback.objects.get().value == -1
    assert Feedback.objects.get().reason == "citou o documento errado"
    long = feedback_set(message=answer, user=personas["ana"], value=-1, reason="x" * 5000)
    assert len(long.reason) == 2000
    assert Feedback.objects.count() == 1
    assert feedback_values(user=personas["ana"], message_ids=[answer.id]) == {answer.id: -1}
    assert feedback_values(user=personas["rita"], message_ids=[answer.id]) == {}


# --- selectors: never another user's data ---------------------------------------------------------


def test_conversation_get_is_404_for_other_users_and_bad_ids(personas: dict[str, Any]) -> None:
    ritas = conversation_create(user=personas["rita"], title="salários")
    assert conversation_get(user=personas["rita"], conversation_id=ritas.id) == ritas
    for user, conversation_id in [
        (personas["ana"], ritas.id),
        (personas["carlos"], ritas.id),
        (personas["rita"], ritas.id + 1000),
        (personas["rita"], "not-a-number"),
    ]:
        with pytest.raises(Http404):
            conversation_get(user=user, conversation_id=conversation_id)


def test_message_get_is_404_for_other_users(personas: dict[str, Any]) -> None:
    answer = _answer(personas["rita"])
    assert message_get(user=personas["rita"], message_id=answer.id) == answer
    with pytest.raises(Http404):
        message_get(user=personas["ana"], message_id=answer.id)
    with pytest.raises(Http404):
        message_get(user=personas["ana"], message_id="1; DROP TABLE x")


def test_conversation_list_is_scoped_even_when_searching(personas: dict[str, Any]) -> None:
    anas = conversation_create(user=personas["ana"])
    message_store_user(conversation=anas, text="férias no Natal")
    ritas = conversation_create(user=personas["rita"])
    message_store_user(conversation=ritas, text="férias e banda P3")
    assert list(conversation_list(user=personas["ana"])) == [anas]
    assert list(conversation_list(user=personas["ana"], search="férias")) == [anas]
    assert list(conversation_list(user=personas["ana"], search="banda P3")) == []
    assert list(conversation_list(user=personas["rita"], search="P3")) == [ritas]


def test_document_readable_follows_the_groups(personas: dict[str, Any]) -> None:
    collection = default_collection()
    public = collection.documents.create(external_id="pub", title="Férias", checksum="a")
    restricted = collection.documents.create(external_id="rh", title="Faixas", checksum="b")
    restricted.groups.add(Group.objects.get(name="rh-restrito"))
    boss = User.objects.create_superuser("boss", password="pw-boss-123")

    for user in (personas["ana"], personas["rita"], personas["carlos"], boss):
        assert document_readable(user=user, document_id=public.id) == public
    assert document_readable(user=personas["rita"], document_id=restricted.id) == restricted
    assert document_readable(user=boss, document_id=restricted.id) == restricted
    for user in (personas["ana"], personas["carlos"]):
        with pytest.raises(Http404):
            document_readable(user=user, document_id=restricted.id)


def test_history_before_is_the_recent_finished_window_oldest_first(
    personas: dict[str, Any],
) -> None:
    conversation = conversation_create(user=personas["ana"])

    def add(role: str, text: str, status: str = Message.Status.COMPLETE) -> Message:
        return Message.objects.create(
            conversation=conversation, role=role, text=text, status=status
        )

    add("user", "um")
    add("assistant", "resposta um")
    add("user", "dois falhou", Message.Status.ERROR)
    add("assistant", "")  # an answer that never got text
    add("user", "três")
    add("assistant", "resposta três", Message.Status.STOPPED)
    current = add("user", "quatro", Message.Status.RECEIVED)
    add("assistant", "depois da pergunta atual")
    other = conversation_create(user=personas["ana"])
    Message.objects.create(conversation=other, role="user", text="outra conversa")

    def texts(limit: int) -> list[str]:
        return [m.text for m in history_before(message=current, limit=limit)]

    assert texts(10) == ["um", "resposta um", "três", "resposta três"]
    assert texts(2) == ["três", "resposta três"]
    assert texts(0) == []


def test_conversation_delete_cascades_to_messages(personas: dict[str, Any]) -> None:
    answer = _answer(personas["ana"])
    feedback_set(message=answer, user=personas["ana"], value=1)
    conversation_delete(conversation=Conversation.objects.get(pk=answer.conversation_id))
    assert not Message.objects.exists()
    assert not Feedback.objects.exists()
