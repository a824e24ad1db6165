"""A person removed from a group no longer reads, in their own conversation, what came from
the group's documents (issue 38, finding 12); the stored rows stay for audit."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Message, TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.turn import turn_context
from retrieval.models import Document
from retrieval.services import default_collection
from tests.conftest import RESTRICTED

pytestmark = pytest.mark.django_db

SALARY_ID = "pt/faixas-salariais-2026"
SALARY_TITLE = "Faixas salariais 2026"
SALARY_FACT = "R$ 9.800 a R$ 13.200"
PUBLIC_ID = "pt/ferias-regras-gerais"
PUBLIC_TITLE = "Férias: regras gerais"
PUBLIC_FACT = "São 30 dias por ano"
NOTE = "não está mais disponível para você"


def _turn(
    conversation: Conversation,
    text: str,
    *,
    hits: list[tuple[str, str]],
    answer: str,
    sources: list[dict[str, object]],
    status: str = Message.Status.COMPLETE,
) -> Message:
    question = message_store_user(conversation=conversation, text=text)
    TurnTrace.objects.create(
        message=question,
        masked_question=text,
        rewrite={"backend": "rules", "queries": [{"text": text, "type": "normalize"}]},
        search={
            "queries": [{"text": text, "type": "original", "weight": 1.0}],
            "hits": [
                {"chunk": 1 + i, "document": d, "title": t, "score": 0.1, "found_by": []}
                for i, (d, t) in enumerate(hits)
            ],
        },
    )
    return Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=answer,
        reply_to=question,
        sources=sources,
        status=status,
    )


@pytest.fixture
def talk(personas: dict[str, User]) -> Conversation:
    """Rita, in the group, got a restricted answer, a clarification naming the restricted
    title, and a public answer."""
    collection = default_collection()
    salary = Document.objects.create(
        collection=collection, external_id=SALARY_ID, title=SALARY_TITLE, checksum="s"
    )
    salary.groups.add(Group.objects.get(name=RESTRICTED))
    public = Document.objects.create(
        collection=collection, external_id=PUBLIC_ID, title=PUBLIC_TITLE, checksum="p"
    )
    conversation = conversation_create(user=personas["rita"])
    _turn(
        conversation,
        "qual a faixa do nível 3?",
        hits=[(SALARY_ID, SALARY_TITLE)],
        answer=f"A faixa vai de {SALARY_FACT} [1].",
        sources=[{"n": 1, "document_id": salary.pk, "title": SALARY_TITLE, "section": "III"}],
    )
    _turn(
        conversation,
        "e isso?",
        hits=[(SALARY_ID, SALARY_TITLE), (PUBLIC_ID, PUBLIC_TITLE)],
        answer=f"Você quer saber de {SALARY_TITLE} ou de {PUBLIC_TITLE}?",
        sources=[],
        status=Message.Status.CLARIFY,
    )
    _turn(
        conversation,
        "e as férias?",
        hits=[(PUBLIC_ID, PUBLIC_TITLE)],
        answer=f"{PUBLIC_FACT} [1].",
        sources=[{"n": 1, "document_id": public.pk, "title": PUBLIC_TITLE, "section": "Prazo"}],
    )
    return conversation


def _page(user: User, conversation: Conversation) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse("conversation", args=[conversation.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_person_removed_from_the_group_no_longer_reads_its_answers_in_their_history(
    talk: Conversation, personas: dict[str, User]
) -> None:
    rita = personas["rita"]
    html = _page(rita, talk)
    assert SALARY_FACT in html and SALARY_TITLE in html and NOTE not in html
    rita.groups.remove(Group.objects.get(name=RESTRICTED))
    html = _page(rita, talk)
    assert SALARY_FACT not in html and SALARY_TITLE not in html and SALARY_ID not in html
    assert NOTE in html  # shown in place of the answer and of the clarification naming the title
    assert PUBLIC_FACT in html and PUBLIC_TITLE in html  # what she may read stays
    assert "qual a faixa do nível 3?" in html  # her own words stay
    # The stored rows stay as they were, for audit.
    assert Message.objects.filter(conversation=talk, text__contains=SALARY_FACT).exists()
    # Back in the group, she reads it again.
    rita.groups.add(Group.objects.get(name=RESTRICTED))
    assert SALARY_FACT in _page(rita, talk)


def test_a_later_turn_does_not_read_an_answer_its_owner_may_no_longer_read(
    talk: Conversation, personas: dict[str, User]
) -> None:
    """The history a new turn reads (its rewrite window, a model's prompt) drops it too."""
    rita = personas["rita"]
    question = message_store_user(conversation=talk, text="e para o nível 4?")
    history = " ".join(m.text for m in turn_context(question.id).request.history)
    assert SALARY_FACT in history
    rita.groups.remove(Group.objects.get(name=RESTRICTED))
    history = " ".join(m.text for m in turn_context(question.id).request.history)
    assert SALARY_FACT not in history and SALARY_TITLE not in history
    assert PUBLIC_FACT in history


def test_the_sidebar_search_does_not_find_words_of_an_answer_its_owner_may_no_longer_read(
    talk: Conversation, personas: dict[str, User]
) -> None:
    """Searching a figure only the restricted answer says finds the conversation while Rita
    is in the group, and not once she has left it (the search would tell what it says);
    her own words and the answers she may read are still found."""
    rita = personas["rita"]
    client = Client()
    client.force_login(rita)

    def found(words: str) -> bool:
        response = client.post(reverse("chat"), {"q": words})
        assert response.status_code == 200
        return talk.pk in [c.pk for c in response.context["conversations"]]

    assert found("9.800")
    rita.groups.remove(Group.objects.get(name=RESTRICTED))
    assert not found("9.800")
    assert found("nível 3")  # her own question
    assert found("30 dias por ano")  # an answer she may still read
