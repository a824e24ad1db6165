"""Staff review: who may open the review pages, what a turn's trace page shows (masked),
the filters and flags, the staff access log, and the retention purge."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from conversations.models import (
    AttentionTurn,
    Conversation,
    Feedback,
    Message,
    StaffAccessLog,
    TurnTrace,
)
from conversations.quality.models import EvalCase, EvaluationRun
from conversations.quality.review.selectors import (
    attention_traces,
    conversations_with_flag,
    traces_with_flag,
)
from conversations.quality.review.timeline import FLAG_LABELS
from conversations.services import (
    conversation_create,
    conversations_purge_expired,
    message_store_user,
)
from conversations.trace import FLAGS, STRONG_RANK, read_trace, turn_flags
from retrieval.models import GlossaryEntry, IngestionJob
from retrieval.services import default_collection

pytestmark = pytest.mark.django_db

EMAIL = "ana.souza@example.com"
CPF = "529.982.247-25"


@pytest.fixture
def boss(db: None) -> User:
    return User.objects.create_superuser("boss", password="pw-boss-123")


@pytest.fixture
def sam(db: None) -> User:
    """Staff, but with no permission on any review model."""
    return User.objects.create_user("sam", password="pw-sam-123", is_staff=True)


@pytest.fixture
def reviewer(db: None) -> User:
    """Staff who may view conversations and traces, nothing else; not a superuser."""
    user = User.objects.create_user("rev", password="pw-rev-123", is_staff=True)
    codenames = ["view_conversation", "view_turntrace", "view_attentionturn", "view_feedback"]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def _search(*hits: tuple[str, int | None, int | None], passages: int = 2) -> dict[str, Any]:
    """A stored search section: one query, hits with (document, vector rank, text rank)."""
    return {
        "queries": [
            {"text": "regra do vale-refeição no trabalho remoto", "type": "expand", "weight": 1.0},
            {"text": "regra do [EMAIL_1]", "type": "original", "weight": 0.5},
        ],
        "hits": [
            {
                "chunk": 100 + i,
                "document": doc,
                "title": f"Título de {doc}",
                "score": round(0.03 - i * 0.001, 6),
                "found_by": [
                    {"query": 0, "rank": i + 1, "vector_rank": v, "text_rank": t, "score": 0.03}
                ],
            }
            for i, (doc, v, t) in enumerate(hits)
        ],
        "passages": [100 + i for i in range(min(passages, len(hits)))],
    }


@dataclass
class Turn:
    conversation: Conversation
    question: Message
    answer: Message | None
    trace: TurnTrace


def make_turn(
    owner: User,
    text: str,
    *,
    search: dict[str, Any] | None = None,
    thumbs: int = 0,
    to_done: float = 900.0,
    errors: list[str] | None = None,
    anomaly: bool = False,
    clarified: bool = False,
    no_results: bool = False,
    small_talk: bool = False,
    answer: str = "O vale-refeição é de R$ 45,00 por dia [1].",
    not_found: bool = False,
) -> Turn:
    conversation = conversation_create(user=owner)
    question = message_store_user(conversation=conversation, text=text)
    trace = TurnTrace.objects.create(
        message=question,
        masked_question=text.replace(EMAIL, "[EMAIL_1]").replace(CPF, "[CPF_1]"),
        masked_window=[{"role": "user", "text": "oi, meu CPF é [CPF_1]"}],
        rewrite={
            "backend": "rules",
            "queries": [{"text": "regra do vale-refeição no trabalho remoto", "type": "expand"}],
            "glossary_hits": [{"term": "VR", "expansion": "vale-refeição", "source": "question"}],
            "corrections": {"rmeoto": "remoto"},
            "anomalies": ["prompt injection attempt"] if anomaly else [],
            "needs_clarification": clarified,
            **({"no_search": True, "small_talk": "thanks"} if small_talk else {}),
        },
        search=search if search is not None else _search(("pt/vr-remoto", 1, 1), ("pt/vr", 2, 5)),
        timings_ms={
            "mask": 0.4,
            "rewrite": 12.0,
            "embed": 40.0,
            "search": 30.0,
            "merge": 0.2,
            "to_done": to_done,
        },
        errors=errors or [],
        anomaly=anomaly,
        clarified=clarified,
        answer={
            "kind": "extractive",
            "not_found": not_found,
            "coverage": 0.05 if not_found else 0.6,
        },
        no_results=no_results,
    )
    reply = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=f"{answer} Escreva para {EMAIL}.",
        reply_to=question,
        sources=[
            {"n": 1, "document_id": 1, "title": "Vale-refeição no remoto", "section": "Valor"},
            {"n": 2, "document_id": 2, "title": "Vale-refeição", "section": "Regra geral"},
        ],
    )
    if thumbs:
        Feedback.objects.create(message=reply, user=owner, value=thumbs, reason=f"eu, {EMAIL}")
    return Turn(conversation, question, reply, trace)


# --- access ---------------------------------------------------------------------------------


def _review_urls(turn: Turn) -> list[tuple[str, str]]:
    """Every review URL this issue adds, with the method to call it."""
    job = IngestionJob.objects.create(collection=default_collection(), paths=[])
    run = EvaluationRun.objects.create(
        collection=default_collection(), source_label="cases", modes=["none"], ks=[5]
    )
    case = EvalCase.objects.create(collection=default_collection(), question="regra do VR")
    log = StaffAccessLog.objects.create(
        username="boss", conversation=turn.conversation, conversation_ref=turn.conversation.pk
    )
    conv, trace = turn.conversation.pk, turn.trace.pk
    return [
        ("get", reverse("admin:conversations_conversation_changelist")),
        ("get", reverse("admin:conversations_conversation_change", args=[conv])),
        ("get", reverse("admin:conversations_turntrace_changelist")),
        ("get", reverse("admin:conversations_turntrace_change", args=[trace])),
        ("get", reverse("admin:conversations_turntrace_retry", args=[trace])),
        ("get", reverse("admin:conversations_turntrace_mark_documents", args=[trace])),
        ("post", reverse("admin:conversations_turntrace_mark_documents", args=[trace])),
        ("post", reverse("admin:conversations_turntrace_reviewed", args=[trace])),
        ("get", reverse("admin:conversations_attentionturn_changelist")),
        ("get", reverse("admin:conversations_attentionturn_change", args=[trace])),
        ("get", reverse("admin:conversations_staffaccesslog_changelist")),
        ("get", reverse("admin:conversations_staffaccesslog_change", args=[log.pk])),
        ("get", reverse("admin:conversations_feedback_changelist")),
        ("get", reverse("admin:retrieval_glossaryentry_changelist")),
        ("get", reverse("admin:retrieval_glossaryentry_add") + f"?term=TRI&from_trace={trace}"),
        ("get", reverse("admin:retrieval_glossaryentry_import")),
        ("post", reverse("admin:retrieval_glossaryentry_import")),
        ("get", reverse("admin:retrieval_glossaryentry_export")),
        ("get", reverse("admin:retrieval_document_changelist")),
        ("get", reverse("admin:retrieval_document_add")),
        ("post", reverse("admin:retrieval_document_add")),
        ("get", reverse("admin:retrieval_ingestionjob_changelist")),
        ("get", reverse("admin:retrieval_ingestionjob_change", args=[job.pk])),
        ("get", reverse("admin:retrieval_ingestionjob_progress", args=[job.pk])),
        ("get", reverse("admin:quality_evalcase_changelist")),
        ("get", reverse("admin:quality_evalcase_change", args=[case.pk])),
        ("post", reverse("admin:retrieval_glossaryentry_add") + f"?from_trace={trace}"),
        ("post", reverse("admin:retrieval_document_changelist")),
        ("get", reverse("admin:quality_evaluationrun_changelist")),
        ("get", reverse("admin:quality_evaluationrun_add")),
        ("post", reverse("admin:quality_evaluationrun_add")),
        ("get", reverse("admin:quality_evaluationrun_change", args=[run.pk])),
        ("get", reverse("admin:quality_evaluationrun_progress", args=[run.pk])),
    ]


def _assert_refused(response: Any, *, login_redirect: bool) -> None:
    if response.status_code == 302:
        assert login_redirect, response["Location"]
        assert response["Location"].startswith(reverse("admin:login"))
    else:
        assert response.status_code in {403, 404}, response.status_code
    body = response.content.decode()
    for secret in ("regra do vale-refeição", "[EMAIL_1]", "pt/vr-remoto", '"done"'):
        assert secret not in body


@pytest.mark.parametrize("who", ["anon", "ana", "sam"])
def test_non_staff_and_staff_without_permission_get_nothing(
    client: Client, personas: dict[str, User], sam: User, who: str
) -> None:
    turn = make_turn(personas["ana"], "regra do VR no rmeoto", thumbs=-1)
    urls = _review_urls(turn)
    if who == "ana":
        client.force_login(personas["ana"])
    elif who == "sam":
        client.force_login(sam)
    for method, url in urls:
        response = getattr(client, method)(url)
        # Non-staff are sent to the admin's login; staff without the permission get a 403.
        _assert_refused(response, login_redirect=who != "sam")
        if who == "sam" and response.status_code == 302:
            pytest.fail(f"{url}: staff without permission redirected")
    assert StaffAccessLog.objects.count() == 1  # the one made above: no access was logged
    assert not TurnTrace.objects.filter(reviewed_at__isnull=False).exists()
    assert EvalCase.objects.count() == 1 and not GlossaryEntry.objects.exists()


def test_reviewer_sees_conversations_but_no_documents_glossary_or_log(
    client: Client, personas: dict[str, User], reviewer: User
) -> None:
    turn = make_turn(personas["ana"], "regra do VR no rmeoto")
    client.force_login(reviewer)
    page = client.get(
        reverse("admin:conversations_conversation_change", args=[turn.conversation.pk])
    )
    assert page.status_code == 200
    for url in (
        reverse("admin:conversations_staffaccesslog_changelist"),
        reverse("admin:retrieval_glossaryentry_import"),
        reverse("admin:retrieval_document_add"),
        reverse("admin:conversations_turntrace_mark_documents", args=[turn.trace.pk]),
    ):
        assert client.get(url).status_code == 403, url


# --- the timeline -----------------------------------------------------------------------------


def test_conversation_timeline_shows_each_turns_trace_masked(
    client: Client, personas: dict[str, User], boss: User
) -> None:
    ana = personas["ana"]
    turn = make_turn(ana, f"regra do VR no rmeoto? meu email é {EMAIL}", thumbs=-1)
    client.force_login(boss)
    page = client.get(
        reverse("admin:conversations_conversation_change", args=[turn.conversation.pk])
    )
    assert page.status_code == 200
    html = page.content.decode()
    # Masked question and window, glossary hit, rewrite backend and output.
    assert "regra do VR no rmeoto? meu email é [EMAIL_1]" in html
    assert "oi, meu CPF é [CPF_1]" in html
    assert "VR → vale-refeição" in html
    assert "regra do vale-refeição no trabalho remoto" in html and "rules" in html
    # Each hit: document, ranks in both legs, fused score, which query found it.
    assert "pt/vr-remoto" in html and "q1 #1 · vec 1 · fts 1" in html
    assert "0.03000" in html or "0,03000" in html  # the fused score, in the page's locale
    # Final sources, which were cited, the answer, timings and the thumbs down.
    assert "Vale-refeição no remoto" in html and "cited" in html and "not cited" in html
    assert "R$ 45,00 por dia" in html
    assert "to_done" in html and "search" in html
    assert "thumbs down" in html
    # No personal data anywhere: the answer, the feedback reason and the title are masked.
    assert EMAIL not in html and CPF not in html
    assert html.count("[EMAIL_1]") >= 3


def test_trace_page_offers_fixes_and_logs_the_access(
    client: Client, personas: dict[str, User], boss: User
) -> None:
    turn = make_turn(personas["ana"], "como funciona o TRI?", search=_search(("pt/x", 1, None)))
    client.force_login(boss)
    html = client.get(reverse("admin:conversations_turntrace_change", args=[turn.trace.pk]))
    assert html.status_code == 200
    text = html.content.decode()
    assert "weak results" in text
    assert "?term=TRI&amp;collection=" in text and f"from_trace={turn.trace.pk}" in text
    assert reverse("admin:conversations_turntrace_mark_documents", args=[turn.trace.pk]) in text
    log = StaffAccessLog.objects.get()
    assert (log.user, log.conversation_ref, log.view) == (boss, turn.conversation.pk, "turn trace")


def test_access_log_is_for_superusers_and_survives_the_conversation(
    client: Client, personas: dict[str, User], boss: User, reviewer: User
) -> None:
    turn = make_turn(personas["ana"], "regra do VR")
    client.force_login(reviewer)
    url = reverse("admin:conversations_conversation_change", args=[turn.conversation.pk])
    assert client.get(url).status_code == 200
    assert client.get(reverse("admin:conversations_staffaccesslog_changelist")).status_code == 403
    conversation_id = turn.conversation.pk
    turn.conversation.delete()
    client.force_login(boss)
    page = client.get(reverse("admin:conversations_staffaccesslog_changelist"))
    assert page.status_code == 200
    assert "rev" in page.content.decode() and "conversation timeline" in page.content.decode()
    assert f"{conversation_id} (deleted)" in page.content.decode()


# --- flags and filters ------------------------------------------------------------------------


def test_flags_filter_conversations_and_traces(personas: dict[str, User], settings: Any) -> None:
    settings.CHATRAG_REVIEW_SLOW_MS = 5000
    ana = personas["ana"]
    fine = make_turn(ana, "ok", thumbs=1)
    slow = make_turn(ana, "lento", to_done=7000)
    down = make_turn(ana, "ruim", thumbs=-1)
    weak = make_turn(ana, "fraco", search=_search(("pt/a", 1, None), ("pt/b", None, 1)))
    broken = make_turn(ana, "erro", errors=["embedding failed: timeout"])
    odd = make_turn(ana, "estranho", anomaly=True)
    asked = make_turn(ana, "e aí?", clarified=True, search={})
    empty = make_turn(ana, "nada", no_results=True, search={"queries": [], "hits": []})
    unsaid = make_turn(ana, "senha do wifi", not_found=True)
    # Small talk searches nothing on purpose: no "no results", not on the panel.
    thanks = make_turn(
        ana, "valeu!", no_results=True, small_talk=True, search={"queries": [], "hits": []}
    )
    expected = {
        "slow": slow,
        "thumbs_down": down,
        "thumbs_up": fine,
        "weak": weak,
        "errors": broken,
        "anomaly": odd,
        "clarified": asked,
        "no_results": empty,
        "not_found": unsaid,
    }
    assert set(expected) == set(FLAGS) == set(FLAG_LABELS)
    for flag, turn in expected.items():
        traces = traces_with_flag(flag, TurnTrace.objects.all())
        assert list(traces) == [turn.trace], flag
        assert list(conversations_with_flag(flag)) == [turn.conversation], flag
    # The one Python rule (pages) says what the SQL (filters) says, for every turn and flag.
    turns = [fine, slow, down, weak, broken, odd, asked, empty, thanks, unsaid]
    for turn in turns:
        feedback = set(Feedback.objects.filter(message=turn.answer).values_list("value", flat=True))
        in_python = turn_flags(
            read_trace(turn.trace),
            slow_ms=5000,
            thumbs_down=-1 in feedback,
            thumbs_up=1 in feedback,
        )
        in_sql = [
            flag
            for flag in FLAGS
            if traces_with_flag(flag, TurnTrace.objects.filter(pk=turn.trace.pk)).exists()
        ]
        assert in_python == in_sql, turn.question.text
    assert (
        turn_flags(read_trace(thanks.trace), slow_ms=5000, thumbs_down=False, thumbs_up=False) == []
    )
    panel = attention_traces(AttentionTurn.objects.all())
    assert {t.pk for t in panel} == {t.trace.pk for t in (down, weak, odd, empty, unsaid)}


def test_trace_list_and_timeline_flag_a_turn_alike(
    client: Client, personas: dict[str, User], boss: User, settings: Any
) -> None:
    """One flag rule: the admin's trace list shows what the timeline shows (slow, thumbs up)."""
    settings.CHATRAG_REVIEW_SLOW_MS = 5000
    turn = make_turn(personas["ana"], "lento e bom", to_done=7000, thumbs=1)
    client.force_login(boss)
    page = client.get(reverse("admin:conversations_turntrace_changelist"))
    assert page.status_code == 200
    (row,) = page.context["cl"].result_list
    listed = page.context["cl"].model_admin.flag_list(row)
    assert listed == "slow turn, thumbs up"
    timeline = client.get(
        reverse("admin:conversations_conversation_change", args=[turn.conversation.pk])
    )
    assert "slow turn" in timeline.content.decode() and "thumbs up" in timeline.content.decode()


def test_weak_rule_in_sql_matches_python(personas: dict[str, User]) -> None:
    cases = [
        [("pt/a", STRONG_RANK, STRONG_RANK)],
        [("pt/a", STRONG_RANK + 1, 1)],
        [("pt/a", 1, None), ("pt/b", None, 2)],
        [("pt/a", 9, 9), ("pt/b", 2, 3)],
    ]
    for hits in cases:
        turn = make_turn(personas["ana"], "x", search=_search(*hits))
        in_sql = traces_with_flag("weak", TurnTrace.objects.filter(pk=turn.trace.pk)).exists()
        in_python = read_trace(turn.trace).weak
        assert in_sql == in_python, hits


def test_conversation_list_filters_through_the_admin(
    client: Client, personas: dict[str, User], boss: User, settings: Any
) -> None:
    settings.CHATRAG_REVIEW_SLOW_MS = 5000
    slow = make_turn(personas["ana"], "lento", to_done=9000)
    make_turn(personas["rita"], "rápido")
    client.force_login(boss)
    url = reverse("admin:conversations_conversation_changelist")
    page = client.get(url, {"slow": "yes"})
    assert page.status_code == 200
    assert [c.pk for c in page.context["cl"].result_list] == [slow.conversation.pk]
    by_owner = client.get(url, {"owner__id__exact": personas["rita"].pk})
    assert [c.owner for c in by_owner.context["cl"].result_list] == [personas["rita"]]


def test_panel_lists_open_turns_and_marks_them_reviewed(
    client: Client, personas: dict[str, User], boss: User
) -> None:
    down = make_turn(personas["ana"], "como funciona o TRI?", thumbs=-1)
    make_turn(personas["ana"], "tudo certo", thumbs=1)
    client.force_login(boss)
    url = reverse("admin:conversations_attentionturn_changelist")
    page = client.get(url)
    assert [t.pk for t in page.context["cl"].result_list] == [down.trace.pk]
    html = page.content.decode()
    assert "thumbs down" in html and "add “TRI” to the glossary" in html
    response = client.post(
        url, {"action": "mark_reviewed", "_selected_action": [down.trace.pk]}, follow=True
    )
    assert response.status_code == 200
    assert not client.get(url).context["cl"].result_list
    assert [t.pk for t in client.get(url, {"review": "reviewed"}).context["cl"].result_list] == [
        down.trace.pk
    ]


# --- retention --------------------------------------------------------------------------------


def test_purge_deletes_only_expired_conversations(personas: dict[str, User]) -> None:
    old = make_turn(personas["ana"], "antiga")
    recent = make_turn(personas["ana"], "recente")
    Conversation.objects.filter(pk=old.conversation.pk).update(
        updated_at=timezone.now() - timedelta(days=31)
    )
    assert conversations_purge_expired(days=0) == 0
    assert conversations_purge_expired(days=30) == 1
    assert not Conversation.objects.filter(pk=old.conversation.pk).exists()
    assert not TurnTrace.objects.filter(pk=old.trace.pk).exists()
    assert Conversation.objects.filter(pk=recent.conversation.pk).exists()


def test_purge_runs_from_celery_beat_with_the_retention_setting(
    personas: dict[str, User], settings: Any
) -> None:
    from chatrag.celery import app
    from conversations.tasks import purge_expired

    schedule = settings.CELERY_BEAT_SCHEDULE["purge-expired-conversations"]
    assert schedule["task"] == purge_expired.name
    app.loader.import_default_modules()
    assert purge_expired.name in app.tasks
    old = make_turn(personas["ana"], "antiga")
    Conversation.objects.filter(pk=old.conversation.pk).update(
        updated_at=timezone.now() - timedelta(days=400)
    )
    settings.CHATRAG_RETENTION_DAYS = 365
    assert purge_expired() == 1


def test_the_trace_list_filters_and_counts_turns_by_rewrite_cache(
    client: Client, personas: dict[str, User], boss: User
) -> None:
    cached = make_turn(personas["ana"], "de novo")
    TurnTrace.objects.filter(pk=cached.trace.pk).update(
        rewrite={**cached.trace.rewrite, "cache": "hit"}
    )
    fresh = make_turn(personas["ana"], "primeira vez")
    TurnTrace.objects.filter(pk=fresh.trace.pk).update(
        rewrite={**fresh.trace.rewrite, "cache": "miss"}
    )
    make_turn(personas["ana"], "sem cache")
    client.force_login(boss)
    url = reverse("admin:conversations_turntrace_changelist")
    hits = client.get(url, {"rewrite_cache": "hit"})
    assert [t.pk for t in hits.context["cl"].result_list] == [cached.trace.pk]
    assert hits.context["cl"].model_admin.backend(hits.context["cl"].result_list[0]) == (
        "rules (cache)"
    )
    misses = client.get(url, {"rewrite_cache": "miss"})
    assert [t.pk for t in misses.context["cl"].result_list] == [fresh.trace.pk]
    # With counts shown, the filter gives the hit rate.
    counted = client.get(url, {"_facets": "True"}).content.decode()
    assert "from the cache (1)" in counted and "rewritten (1)" in counted
