"""The "needs attention" panel end to end, on the real pipeline and knowledge base.

An employee asks with a company acronym the documents never use; the turn retrieves the
wrong document and lands on the panel, which offers the acronym as a glossary entry; once a
staff member adds it through the admin, the same question retrieves the right document.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from conversations.models import Message, TurnTrace
from conversations.quality.models import EvalCase
from conversations.quality.review.selectors import attention_traces
from conversations.quality.review.services import turn_retry
from conversations.services import conversation_create, message_store_user
from conversations.trace import read_trace, turn_flags
from conversations.turn import turn_run
from retrieval.models import GlossaryEntry
from retrieval.pipeline.answer.line_model import FEATURES
from tests.conftest import DEMO_KB, SMALL_KB

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "como funciona o TRI?"  # TRI: the company's name for full-time remote work
RIGHT = "pt/trabalho-remoto-integral"


async def _ignore(event: dict[str, Any]) -> None:
    return None


def _ask(user: User, text: str) -> TurnTrace:
    """One real turn, through the same entry point the chat consumer uses."""
    conversation = conversation_create(user=user)
    message = message_store_user(conversation=conversation, text=text)
    async_to_sync(turn_run)(message_id=message.id, emit=_ignore)
    return TurnTrace.objects.get(message=message)


def _first_document(trace: TurnTrace) -> str:
    return read_trace(trace).search.ranking()[0][0]


def test_failing_question_is_on_the_panel_and_its_glossary_entry_fixes_it(
    client: Client, small_kb: Any, personas: dict[str, User]
) -> None:
    failing = _ask(personas["ana"], QUESTION)
    assert _first_document(failing) != RIGHT
    assert read_trace(failing).weak

    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    client.force_login(boss)
    panel = client.get(reverse("admin:conversations_attentionturn_changelist"))
    assert [t.pk for t in panel.context["cl"].result_list] == [failing.pk]
    page = panel.content.decode()
    assert "weak results" in page and QUESTION in page
    # "Add to glossary", prefilled with the acronym the collection does not know.
    link = re.search(r'class="attention-glossary" href="([^"]+)"', page)
    assert link is not None
    add_url = html.unescape(link.group(1))
    assert "term=TRI" in add_url
    form = client.get(add_url)
    assert form.status_code == 200
    assert form.context["adminform"].form.initial["term"] == "TRI"

    saved = client.post(
        add_url,
        {
            "collection": small_kb.pk,
            "term": "TRI",
            "expansion": "trabalho remoto integral",
            "area": "",
            "active": "on",
            "_save": "Save",
        },
    )
    # Back to the turn, showing what it retrieves now.
    retry_url = reverse("admin:conversations_turntrace_retry", args=[failing.pk])
    assert saved.status_code == 302 and saved["Location"] == retry_url
    assert GlossaryEntry.objects.filter(collection=small_kb, term="TRI").exists()
    retry = client.get(retry_url)
    assert retry.status_code == 200
    assert retry.context["after"][0][0] == RIGHT
    assert retry.context["before"][0][0] != RIGHT
    assert "TRI → trabalho remoto integral" in retry.content.decode()
    assert turn_retry(trace=failing, viewer=boss).documents[0][0] == RIGHT

    # The same question asked again retrieves the right document, and is not flagged.
    fixed = _ask(personas["ana"], QUESTION)
    assert _first_document(fixed) == RIGHT
    assert not read_trace(fixed).weak
    assert fixed.rewrite["glossary_hits"][0]["term"] == "TRI"


def test_marking_the_right_documents_makes_an_evaluation_case(
    client: Client, small_kb: Any, personas: dict[str, User]
) -> None:
    failing = _ask(personas["ana"], QUESTION)
    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    client.force_login(boss)
    url = reverse("admin:conversations_turntrace_mark_documents", args=[failing.pk])
    form = client.get(url)
    assert form.status_code == 200
    choices = dict(form.context["form"].fields["retrieved"].choices)
    assert RIGHT in choices  # the right document was retrieved, just not first
    saved = client.post(
        url, {"question": QUESTION, "retrieved": [RIGHT], "category": "standalone", "note": ""}
    )
    assert saved.status_code == 302
    case = EvalCase.objects.get()
    assert case.question == QUESTION and case.category == "standalone"
    assert [d.external_id for d in case.relevant_documents.all()] == [RIGHT]
    assert case.source_message_id == failing.message_id and case.created_by == boss
    failing.refresh_from_db()
    assert failing.reviewed_at is not None and failing.reviewed_by == boss
    panel = client.get(reverse("admin:conversations_attentionturn_changelist"))
    assert not panel.context["cl"].result_list
    assert Message.objects.filter(pk=failing.message_id).exists()


def _judged_demo_turns() -> list[dict[str, Any]]:
    """The demo's judged turns (demo/eval/tasks.jsonl) whose documents the test base holds."""
    lines = (DEMO_KB.parent / "eval" / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    tasks = [json.loads(line) for line in lines if line.strip()]
    return [t for t in tasks if t.get("relevant") and set(t["relevant"]) <= set(SMALL_KB)]


def test_the_panel_flags_no_good_demo_turn(small_kb: Any, personas: dict[str, User]) -> None:
    """Turns judged good on the demo set (their first document is a right one) and the small
    talk after them are not "weak results" nor "no results": the panel lists real trouble."""
    good = []
    for task in _judged_demo_turns():
        conversation = conversation_create(user=personas["ana"])
        for item in task["history"]:
            Message.objects.create(conversation=conversation, role=item["role"], text=item["text"])
        message = message_store_user(conversation=conversation, text=task["question"])
        async_to_sync(turn_run)(message_id=message.id, emit=_ignore)
        trace = TurnTrace.objects.get(message=message)
        if not trace.clarified and _first_document(trace) in task["relevant"]:
            good.append(trace)
        if task["id"] == "pt-001":
            thanks = message_store_user(conversation=conversation, text="valeu, obrigado!")
            async_to_sync(turn_run)(message_id=thanks.id, emit=_ignore)
            good.append(TurnTrace.objects.get(message=thanks))
    assert len(good) >= 6  # not vacuous: most of these turns are good on the real pipeline
    for trace in good:
        flags = turn_flags(read_trace(trace), slow_ms=10**9, thumbs_down=False, thumbs_up=False)
        assert flags == [], (trace.masked_question, flags)
    assert not attention_traces(TurnTrace.objects.filter(pk__in=[t.pk for t in good])).exists()


def test_the_panel_shows_times_in_the_sites_time_zone(
    client: Client, small_kb: Any, personas: dict[str, User], settings: Any
) -> None:
    """The panel printed UTC while traces and the timeline showed local time."""
    from datetime import UTC, datetime

    settings.TIME_ZONE = "America/Sao_Paulo"  # UTC-3, no daylight saving since 2019
    trace = _ask(personas["ana"], QUESTION)
    TurnTrace.objects.filter(pk=trace.pk).update(
        created_at=datetime(2026, 5, 4, 12, 30, tzinfo=UTC)
    )
    client.force_login(User.objects.create_superuser("tz-boss", password="pw-tz-boss-1"))
    panel = client.get(reverse("admin:conversations_attentionturn_changelist")).content.decode()
    assert "2026-05-04 09:30" in panel and "2026-05-04 12:30" not in panel


def test_an_answer_that_says_the_pages_dont_hold_it_is_on_the_panel_with_its_why(
    client: Client, small_kb: Any, personas: dict[str, User]
) -> None:
    """The extractive answer's check is stored with the turn (no document text): a turn
    whose answer said the pages found don't hold it is flagged "pages did not say" and
    listed for staff; an answered turn keeps each quoted line's card, score and words."""
    missing = _ask(personas["ana"], "qual a senha do wifi dos visitantes na recepção?")
    stored = read_trace(missing).answer
    assert (stored.kind, stored.not_found) == ("extractive", True)
    assert stored.coverage is not None and stored.coverage < 0.1
    assert "not_found" in turn_flags(
        read_trace(missing), slow_ms=1e9, thumbs_down=False, thumbs_up=False
    )
    assert "text" not in json.dumps(missing.answer)  # no document's words in the trace

    answered = _ask(personas["ana"], "estagiário recebe vale-refeição?")
    check = read_trace(answered).answer
    assert check.kind == "extractive" and not check.not_found
    assert check.lines and all(line.n >= 1 and line.score > 0 for line in check.lines)
    assert any(line.says for line in check.lines)
    # The line model's reasons: feature names it knows, never a document's words.
    assert any(line.features for line in check.lines)
    assert {name for line in check.lines for name, _ in line.features} <= set(FEATURES)

    assert [t.pk for t in attention_traces(TurnTrace.objects.all())] == [missing.pk]
    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    client.force_login(boss)
    panel = client.get(reverse("admin:conversations_attentionturn_changelist"))
    assert "pages did not say" in panel.content.decode()
    timeline = client.get(
        reverse("admin:conversations_conversation_change", args=[answered.message.conversation_id])
    ).content.decode()
    assert "Why these lines" in timeline and "what weighed most" in timeline
