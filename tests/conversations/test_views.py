"""The chat pages: login, the owner-scoped sidebar and actions, documents, feedback, healthz."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Feedback, Message, TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.views.present import answer_blocks, highlight_segments, text_segments
from retrieval.models import Document

pytestmark = pytest.mark.django_db

RESTRICTED_DOC = "pt/faixas-salariais-2026"
PUBLIC_DOC = "pt/vale-refeicao-regra-geral"


def as_user(client: Client, user: User) -> Client:
    client.force_login(user)
    return client


def make_turn(
    owner: User,
    question: str,
    *,
    answer: str | None = None,
    status: str = Message.Status.COMPLETE,
    conversation: Conversation | None = None,
    sources: list[dict[str, Any]] | None = None,
    rewrite: dict[str, Any] | None = None,
    extractive: bool = False,
) -> tuple[Conversation, Message, Message | None]:
    """A stored user message, its trace and (unless `answer` is None) the answer to it."""
    conversation = conversation or conversation_create(user=owner)
    question_msg = message_store_user(conversation=conversation, text=question)
    if rewrite is not None:
        TurnTrace.objects.create(message=question_msg, rewrite=rewrite)
    if answer is None:
        return conversation, question_msg, None
    Message.objects.filter(pk=question_msg.pk).update(status=Message.Status.COMPLETE)
    reply = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=answer,
        status=status,
        reply_to=question_msg,
        sources=sources or [],
        extractive=extractive,
    )
    return conversation, question_msg, reply


def card(n: int, title: str = "Vale-refeição: regra geral") -> dict[str, Any]:
    return {
        "n": n,
        "document_id": 1,
        "chunk_id": 10 + n,
        "title": title,
        "section": "Quem tem direito",
        "snippet": "O VR é pago em dias úteis…",
        "url": f"/documents/1/?chunk={10 + n}#chunk-{10 + n}",
    }


# --- login and health -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("chat", []),
        ("conversation", [1]),
        ("document", [1]),
    ],
)
def test_pages_require_login(client: Client, name: str, args: list[int]) -> None:
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.parametrize("name", ["feedback", "conversation_rename", "conversation_delete"])
def test_actions_require_login(client: Client, name: str) -> None:
    response = client.post(reverse(name, args=[1]), {"value": "1", "title": "x"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_login_page_and_login_redirects_to_chat(client: Client, personas: dict[str, User]) -> None:
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b'name="username"' in page.content and b'autocomplete="current-password"' in page.content
    response = client.post(reverse("login"), {"username": "ana", "password": "pw-ana-123"})
    assert response.status_code == 302
    assert response["Location"] == reverse("chat")
    assert client.get(reverse("chat")).status_code == 200


def test_wrong_password_shows_an_error(client: Client, personas: dict[str, User]) -> None:
    response = client.post(reverse("login"), {"username": "ana", "password": "nope"})
    assert response.status_code == 200
    assert b'role="alert"' in response.content


def test_logout_is_a_post(client: Client, personas: dict[str, User]) -> None:
    as_user(client, personas["ana"])
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert response["Location"] == reverse("login")
    assert client.get(reverse("chat")).status_code == 302


def test_healthz_needs_no_login(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": True}


# --- sidebar --------------------------------------------------------------------------------


def test_sidebar_lists_only_own_conversations_newest_first(
    client: Client, personas: dict[str, User]
) -> None:
    make_turn(personas["ana"], "Primeira pergunta da Ana")
    make_turn(personas["ana"], "Segunda pergunta da Ana")
    make_turn(personas["rita"], "Pergunta secreta da Rita")
    html = as_user(client, personas["ana"]).get(reverse("chat")).content.decode()
    assert "Primeira pergunta da Ana" in html and "Segunda pergunta da Ana" in html
    assert "Rita" not in html.split('id="conv-list"')[1].split("</ul>")[0]
    assert html.index("Segunda pergunta da Ana") < html.index("Primeira pergunta da Ana")


def test_sidebar_search_filters_by_title_and_content(
    client: Client, personas: dict[str, User]
) -> None:
    conversation, _, _ = make_turn(personas["ana"], "Sobre férias", answer="Trinta dias corridos.")
    make_turn(personas["ana"], "Sobre reembolso de táxi")
    make_turn(personas["rita"], "Férias da Rita")
    as_user(client, personas["ana"])
    html = client.post(reverse("chat"), {"q": "férias"}).content.decode()
    conv_list = html.split('id="conv-list"')[1].split("</ul>")[0]
    assert "Sobre férias" in conv_list
    assert "reembolso" not in conv_list and "Rita" not in conv_list
    by_content = client.post(reverse("chat"), {"q": "corridos"}).content.decode()
    assert f'data-conversation-id="{conversation.id}"' in by_content
    nothing = client.post(reverse("chat"), {"q": "inexistente"}).content.decode()
    assert 'class="conv-empty" id="conv-empty">' in nothing


# --- conversation page ----------------------------------------------------------------------


def test_conversation_of_another_user_is_404(client: Client, personas: dict[str, User]) -> None:
    conversation, _, _ = make_turn(personas["rita"], "Só minha")
    response = as_user(client, personas["ana"]).get(reverse("conversation", args=[conversation.id]))
    assert response.status_code == 404


def test_conversation_renders_answer_sources_citations_and_trace(
    client: Client, personas: dict[str, User]
) -> None:
    rewrite = {
        "backend": "rules",
        "model": None,
        "queries": [
            {"text": "regra do vale-refeição no trabalho remoto", "type": "expand", "weight": 1.0},
            {"text": "férias", "type": "decompose", "weight": 1.0},
        ],
        "glossary_hits": [
            {"term": "VR", "expansion": "vale-refeição", "source": "question"},
            {"term": "home", "expansion": "trabalho remoto", "source": "question"},
        ],
        "corrections": {"reenbolso": "reembolso"},
        "notes": ["follow-up: took the topic from the previous question"],
        "anomalies": [],
        "needs_clarification": False,
        "clarification": None,
    }
    conversation, question, answer = make_turn(
        personas["ana"],
        "Qual a regra do VR no home?",
        answer="Resposta extrativa.\n\n- O VR é pago no **home** [1]. Veja também [2] e [9].",
        sources=[card(1), card(2, "Trabalho remoto integral")],
        rewrite=rewrite,
        extractive=True,
    )
    assert answer is not None
    html = as_user(client, personas["ana"]).get(reverse("conversation", args=[conversation.id]))
    body = html.content.decode()
    assert html.status_code == 200
    assert f'id="turn-{question.id}"' in body and 'data-state="complete"' in body
    # Citations that match a card are links to it; [9] matches none and stays text.
    assert f'<a class="cite" href="#src-{answer.id}-1">[1]</a>' in body
    assert f'<a class="cite" href="#src-{answer.id}-2">[2]</a>' in body
    assert "[9]" in body and f"#src-{answer.id}-9" not in body
    assert "no <strong>home</strong> <a" in body  # Markdown bold, nothing else
    assert 'data-raw="Resposta extrativa.' in body  # the raw text, for resuming a stream
    assert f'id="src-{answer.id}-1"' in body
    assert 'href="/documents/1/?chunk=11#chunk-11"' in body
    assert "Trabalho remoto integral" in body
    # The extractive label and the trace with glossary marks, types and corrections.
    assert 'data-slot="extractive">' in body  # shown: no `hidden` on it
    assert '<mark class="gloss">VR → vale-refeição</mark>' in body
    assert "<mark>vale-refeição</mark>" in body
    assert 'data-type="expand"' in body and 'data-type="decompose"' in body
    assert "<del>reenbolso</del> → <ins>reembolso</ins>" in body
    assert "follow-up: took the topic from the previous question" in body


def test_streaming_and_failed_turns_render_their_state(
    client: Client, personas: dict[str, User]
) -> None:
    conversation, _, _ = make_turn(
        personas["ana"], "Pergunta longa", answer="Parte", status=Message.Status.STREAMING
    )
    failed = message_store_user(conversation=conversation, text="Outra")
    Message.objects.filter(pk=failed.pk).update(status=Message.Status.ERROR)
    body = (
        as_user(client, personas["ana"])
        .get(reverse("conversation", args=[conversation.id]))
        .content.decode()
    )
    assert 'data-state="streaming"' in body
    assert 'data-state="error"' in body


def test_clarification_options_are_buttons(client: Client, personas: dict[str, User]) -> None:
    rewrite = {
        "backend": "rules",
        "queries": [{"text": "e isso?", "type": "normalize", "weight": 1.0}],
        "glossary_hits": [],
        "needs_clarification": True,
        "clarification": {"question": "Sobre o que?", "options": ["férias", "reembolso"]},
    }
    conversation, _, _ = make_turn(
        personas["ana"],
        "e isso?",
        answer="Sobre o que?",
        status=Message.Status.CLARIFY,
        rewrite=rewrite,
    )
    body = (
        as_user(client, personas["ana"])
        .get(reverse("conversation", args=[conversation.id]))
        .content.decode()
    )
    assert 'data-option="férias"' in body and 'data-option="reembolso"' in body


def test_model_and_user_text_is_escaped(client: Client, personas: dict[str, User]) -> None:
    conversation, _, _ = make_turn(
        personas["ana"],
        "<script>alert(1)</script>",
        answer="<img src=x onerror=alert(2)> [1]",
        sources=[card(1, "<b>título</b>")],
    )
    body = (
        as_user(client, personas["ana"])
        .get(reverse("conversation", args=[conversation.id]))
        .content.decode()
    )
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<img src=x" not in body and "<b>título</b>" not in body


def test_pages_allow_a_strict_content_security_policy(
    client: Client, personas: dict[str, User]
) -> None:
    conversation, _, _ = make_turn(
        personas["ana"], "Pergunta", answer="Resposta [1]", sources=[card(1)]
    )
    as_user(client, personas["ana"])
    for url in (reverse("chat"), reverse("conversation", args=[conversation.id]), reverse("login")):
        body = client.get(url).content.decode()
        assert " style=" not in body
        assert not re.search(r"\son[a-z]+=", body), url
        for tag in re.findall(r"<script[^>]*>", body):
            assert 'type="application/json"' in tag or " src=" in tag, tag


# --- rename and delete ----------------------------------------------------------------------


def test_rename_own_conversation(client: Client, personas: dict[str, User]) -> None:
    conversation, _, _ = make_turn(personas["ana"], "Título antigo")
    as_user(client, personas["ana"])
    response = client.post(
        reverse("conversation_rename", args=[conversation.id]), {"title": "  Novo   título "}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("conversation", args=[conversation.id])
    conversation.refresh_from_db()
    assert conversation.title == "Novo título"


def test_rename_rejects_blank_title_and_get(client: Client, personas: dict[str, User]) -> None:
    conversation, _, _ = make_turn(personas["ana"], "Título")
    as_user(client, personas["ana"])
    url = reverse("conversation_rename", args=[conversation.id])
    client.post(url, {"title": "   "})
    conversation.refresh_from_db()
    assert conversation.title == "Título"
    assert client.get(url).status_code == 405


def test_rename_and_delete_of_another_users_conversation_are_404(
    client: Client, personas: dict[str, User]
) -> None:
    conversation, _, _ = make_turn(personas["rita"], "Da Rita")
    as_user(client, personas["ana"])
    assert (
        client.post(
            reverse("conversation_rename", args=[conversation.id]), {"title": "x"}
        ).status_code
        == 404
    )
    assert client.post(reverse("conversation_delete", args=[conversation.id])).status_code == 404
    conversation.refresh_from_db()
    assert conversation.title == "Da Rita"


def test_delete_own_conversation(client: Client, personas: dict[str, User]) -> None:
    conversation, _, _ = make_turn(personas["ana"], "Apagar")
    other, _, _ = make_turn(personas["ana"], "Manter")
    as_user(client, personas["ana"])
    url = reverse("conversation_delete", args=[conversation.id])
    assert client.get(url).status_code == 405
    response = client.post(url, {"next": reverse("conversation", args=[conversation.id])})
    assert response.status_code == 302
    assert response["Location"] == reverse("chat")  # not the page of what was deleted
    assert not Conversation.objects.filter(pk=conversation.id).exists()
    response = client.post(
        reverse("conversation_delete", args=[other.id]), {"next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("chat")


def test_actions_need_the_csrf_token(personas: dict[str, User]) -> None:
    conversation, _, _ = make_turn(personas["ana"], "Com CSRF")
    client = Client(enforce_csrf_checks=True)
    client.force_login(personas["ana"])
    response = client.post(reverse("conversation_delete", args=[conversation.id]))
    assert response.status_code == 403
    assert Conversation.objects.filter(pk=conversation.id).exists()


# --- feedback -------------------------------------------------------------------------------


def test_feedback_on_own_answer(client: Client, personas: dict[str, User]) -> None:
    _, question, answer = make_turn(personas["ana"], "Pergunta", answer="Resposta")
    assert answer is not None
    as_user(client, personas["ana"])
    url = reverse("feedback", args=[answer.id])
    response = client.post(url, {"value": "1"})
    assert response.status_code == 200
    assert response.json() == {"ok": True, "value": 1, "reason": ""}
    response = client.post(url, {"value": "-1", "reason": "Faltou a regra do estágio"})
    assert response.json()["value"] == -1
    feedback = Feedback.objects.get(message=answer, user=personas["ana"])
    assert (feedback.value, feedback.reason) == (-1, "Faltou a regra do estágio")
    # The stored thumb is shown pressed after a reload.
    page = client.get(reverse("conversation", args=[answer.conversation_id])).content.decode()
    assert 'data-value="-1" aria-pressed="true"' in page
    # Bad values and feedback on a question are refused.
    assert client.post(url, {"value": "5"}).status_code == 400
    question_url = reverse("feedback", args=[question.id])
    assert client.post(question_url, {"value": "1"}).status_code == 400
    assert client.get(url).status_code == 405


def test_feedback_on_another_users_answer_is_404(client: Client, personas: dict[str, User]) -> None:
    _, _, answer = make_turn(personas["rita"], "Pergunta", answer="Resposta")
    assert answer is not None
    response = as_user(client, personas["ana"]).post(
        reverse("feedback", args=[answer.id]), {"value": "1"}
    )
    assert response.status_code == 404
    assert not Feedback.objects.exists()


# --- documents ------------------------------------------------------------------------------


def test_document_permissions(client: Client, personas: dict[str, User], small_kb: Any) -> None:
    restricted = Document.objects.get(external_id=RESTRICTED_DOC)
    public = Document.objects.get(external_id=PUBLIC_DOC)
    url = reverse("document", args=[restricted.id])
    assert as_user(client, personas["ana"]).get(url).status_code == 404
    assert as_user(client, personas["carlos"]).get(url).status_code == 404
    assert as_user(client, personas["rita"]).get(url).status_code == 200
    admin = User.objects.create_superuser("boss", password="pw-boss-123")
    assert as_user(client, admin).get(url).status_code == 200
    as_user(client, personas["ana"])
    assert client.get(reverse("document", args=[public.id])).status_code == 200
    assert client.get(reverse("document", args=[999999])).status_code == 404


def test_document_shows_all_chunks_in_order_and_highlights_one(
    client: Client, personas: dict[str, User], small_kb: Any
) -> None:
    document = Document.objects.get(external_id=PUBLIC_DOC)
    chunks = list(document.chunks.order_by("position"))
    assert len(chunks) >= 2
    target = chunks[1]
    response = as_user(client, personas["ana"]).get(
        reverse("document", args=[document.id]), {"chunk": target.id}
    )
    body = response.content.decode()
    assert document.title in body
    positions = [body.index(f'id="chunk-{c.id}"') for c in chunks]
    assert positions == sorted(positions)
    assert re.search(rf'class="chunk is-highlighted" id="chunk-{target.id}"', body)
    assert body.count("is-highlighted") == 1
    assert chunks[0].heading in body
    assert "<strong>R$ 48,00 por dia útil</strong>" in body and "**" not in body
    # A nonsense chunk parameter highlights nothing and is not an error.
    other = as_user(client, personas["ana"]).get(
        reverse("document", args=[document.id]), {"chunk": "x"}
    )
    assert other.status_code == 200 and "is-highlighted" not in other.content.decode()


# --- language ---------------------------------------------------------------------------------


def test_language_switch_translates_the_ui(client: Client, personas: dict[str, User]) -> None:
    from django.conf import settings

    for code in ("es", "en"):
        catalog = Path(settings.LOCALE_PATHS[0]) / code / "LC_MESSAGES" / "django.mo"
        assert catalog.exists(), "compile the catalogs: python manage.py compilemessages -i .venv"
    as_user(client, personas["ana"])
    assert "Nova conversa" in client.get(reverse("chat")).content.decode()
    response = client.post("/i18n/setlang/", {"language": "es", "next": reverse("chat")})
    assert response.status_code == 302
    spanish = client.get(reverse("chat")).content.decode()
    assert 'lang="es"' in spanish
    assert "Nueva conversación" in spanish
    client.post("/i18n/setlang/", {"language": "en", "next": reverse("chat")})
    assert "New conversation" in client.get(reverse("chat")).content.decode()


# --- the pure rendering helpers -------------------------------------------------------------------


def test_text_segments_split_bold_and_existing_citations_only() -> None:
    segments = text_segments("Pago **por dia útil** [1], veja [3] e [02].", source_count=2)
    assert [(s.text, s.cite, s.strong) for s in segments] == [
        ("Pago ", 0, False),
        ("por dia útil", 0, True),
        (" ", 0, False),
        ("[1]", 1, False),
        (", veja [3] e ", 0, False),
        ("[02]", 2, False),
        (".", 0, False),
    ]
    assert "".join(s.text for s in text_segments("sem nada", source_count=0)) == "sem nada"
    assert text_segments("", source_count=3) == []


def test_highlight_segments_marks_expansions_ignoring_case() -> None:
    segments = highlight_segments(
        "Regra do Vale-Refeição no trabalho remoto", ["vale-refeição", ""]
    )
    assert [(s.text, s.mark) for s in segments] == [
        ("Regra do ", False),
        ("Vale-Refeição", True),
        (" no trabalho remoto", False),
    ]
    assert [s.text for s in highlight_segments("a+b (c)", ["(c)"]) if s.mark] == ["(c)"]


def test_answer_blocks_read_paragraphs_bullets_nested_items_and_numbered_steps() -> None:
    text = (
        "Sobre o prazo:\n\n- Lance a despesa **em até 30 dias** [1]\n"
        "- Os documentos aceitos são:\n  - nota fiscal [2]\n  - recibo\n\n"
        "3. Envie o pedido.\n4. Aguarde a aprovação. [9]\nDepois, confira o extrato."
    )
    blocks = answer_blocks(text, source_count=2)

    def plain(segments: list) -> str:
        return "".join(s.text for s in segments)

    assert [b.kind for b in blocks] == ["p", "ul", "ol", "p"]
    assert plain(blocks[0].segments) == "Sobre o prazo:"
    bullets = blocks[1].items
    assert [plain(i.segments) for i in bullets] == [
        "Lance a despesa em até 30 dias [1]",
        "Os documentos aceitos são:",
    ]
    assert [s.cite for s in bullets[0].segments if s.cite] == [1]
    assert [plain(c) for c in bullets[1].children] == ["nota fiscal [2]", "recibo"]
    # A numbered procedure keeps its own numbers; a citation of no source stays text.
    assert blocks[2].start == 3
    assert [plain(i.segments) for i in blocks[2].items] == [
        "Envie o pedido.",
        "Aguarde a aprovação. [9]",
    ]
    assert plain(blocks[3].segments) == "Depois, confira o extrato."
    # Text with no list is one paragraph, its line breaks kept.
    assert [(b.kind, plain(b.segments)) for b in answer_blocks("a\nb")] == [("p", "a\nb")]
    assert answer_blocks("") == []
