"""Rewrite fidelity review (issue 15, point 4): which turns are sampled, the review page and
its permissions, restricted text on it, and the rate charted beside the evaluation runs.

The turns here are stored traces (as `test_review_restricted` writes them); a real turn
through the turn's own path is in `test_fidelity_turn.py`.
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from conversations.models import Conversation, Message, StaffAccessLog, TurnTrace
from conversations.quality.fidelity import (
    FidelityError,
    FidelityWeek,
    fidelity_chart,
    fidelity_pending_count,
    fidelity_sampled,
    fidelity_weeks,
    rewrite_fidelity_judge,
    rewrite_fidelity_queue,
    rewrite_judgeable,
)
from conversations.quality.models import RewriteFidelity
from conversations.services import conversation_create, message_store_user, trace_write
from retrieval.models import Document
from retrieval.services import default_collection
from tests.conftest import RESTRICTED

SALARY_ID = "pt/faixas-salariais-2026"
SALARY_TITLE = "Faixas salariais 2026"
SALARY_FACT = "R$ 9.800 a R$ 13.200"
PUBLIC_ID = "pt/ferias-regras-gerais"
PUBLIC_TITLE = "Férias: regras gerais"
SECRETS = (SALARY_ID, SALARY_TITLE, SALARY_FACT, "13.200")
PLACEHOLDER_PASSAGE = "[restricted passage]"
EMAIL = "ana.souza@example.com"
POLICY = "rules-2026.12.1"


# --- which turns are sampled (pure) -----------------------------------------------------------


def test_rate_zero_samples_no_turn_and_rate_one_every_turn() -> None:
    ids = range(1, 5001)
    assert not any(fidelity_sampled(message_id=i, rate=0.0) for i in ids)
    assert all(fidelity_sampled(message_id=i, rate=1.0) for i in ids)


def test_a_middle_rate_samples_that_share_of_turns_the_same_way_every_time() -> None:
    ids = range(1, 20001)
    two = {i for i in ids if fidelity_sampled(message_id=i, rate=0.02)}
    half = {i for i in ids if fidelity_sampled(message_id=i, rate=0.5)}
    # The share asked for, within sampling noise (about 3 standard deviations).
    assert 0.017 < len(two) / len(ids) < 0.023
    assert 0.49 < len(half) / len(ids) < 0.51
    # Deterministic: asked again, the same turns; a higher rate only adds turns.
    assert two == {i for i in ids if fidelity_sampled(message_id=i, rate=0.02)}
    assert two < half
    # Not a pattern of the ids (every 50th): neighbours are sampled independently.
    assert len({i % 50 for i in two}) > 40


def _fields(**rewrite: Any) -> dict[str, Any]:
    queries = rewrite.pop("queries", [{"text": "férias por ano", "type": "normalize"}])
    return {
        "errors": [],
        "masked_question": "quantas férias?",
        "rewrite": {"backend": "rules", "policy": POLICY, "queries": queries, **rewrite},
        "search": {"queries": queries, "hits": [], "passages": []},
    }


def test_small_talk_and_a_turn_without_its_search_are_not_judged() -> None:
    assert rewrite_judgeable(_fields())
    assert not rewrite_judgeable(_fields(no_search=True, small_talk="thanks", queries=[]))
    assert not rewrite_judgeable({"errors": ["turn failed: boom"]})  # failed before the search
    # Left as typed: judged (a follow-up left unchanged may have lost its subject).
    unchanged = [{"text": "e para estagiários?", "type": "normalize"}]
    assert rewrite_judgeable(_fields(backend="none", policy="none", queries=unchanged))


# --- a turn's trace written: queued or not ----------------------------------------------------


def _question(user: User, text: str = "e para estagiários?") -> Message:
    return message_store_user(conversation=conversation_create(user=user), text=text)


@pytest.mark.django_db
def test_a_sampled_turns_trace_write_queues_it_once_with_its_policy(
    personas: dict[str, User], settings: Any
) -> None:
    settings.CHATRAG_FIDELITY_SAMPLE_RATE = 1.0
    question = _question(personas["ana"])
    trace_write(message=question, fields=_fields())
    item = RewriteFidelity.objects.get(message=question)
    assert (item.policy, item.verdict, item.reviewer, item.reviewed_at) == (
        POLICY,
        "pending",
        None,
        None,
    )
    # The trace written again (the turn failed later): still one item.
    trace_write(message=question, fields={**_fields(), "errors": ["turn failed: x"]})
    assert RewriteFidelity.objects.filter(message=question).count() == 1
    # Small talk is never queued, whatever the rate.
    thanks = _question(personas["ana"], "valeu!")
    trace_write(message=thanks, fields=_fields(no_search=True, queries=[]))
    assert not RewriteFidelity.objects.filter(message=thanks).exists()


@pytest.mark.django_db
def test_the_rate_decides_which_turns_are_queued(personas: dict[str, User], settings: Any) -> None:
    questions = [_question(personas["ana"], f"pergunta {n}") for n in range(40)]
    settings.CHATRAG_FIDELITY_SAMPLE_RATE = 0.0
    for q in questions:
        trace_write(message=q, fields=_fields())
    assert not RewriteFidelity.objects.exists()
    settings.CHATRAG_FIDELITY_SAMPLE_RATE = 0.5
    queued = {q.pk for q in questions if rewrite_fidelity_queue(message=q, fields=_fields())}
    expected = {q.pk for q in questions if fidelity_sampled(message_id=q.pk, rate=0.5)}
    assert queued == expected and 0 < len(queued) < len(questions)
    assert set(RewriteFidelity.objects.values_list("message_id", flat=True)) == queued


# --- the review page and its permissions ------------------------------------------------------


def _staff(name: str, *, rights: list[str], group: bool = False) -> User:
    user = User.objects.create_user(name, password=f"pw-{name}-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=rights))
    if group:
        user.groups.add(Group.objects.get(name=RESTRICTED))
    return user


JUDGE = ["view_rewritefidelity", "change_rewritefidelity"]
READ_ONLY = ["view_rewritefidelity"]


def _turn(
    conversation: Conversation,
    text: str,
    *,
    queries: list[dict[str, Any]],
    window: list[dict[str, str]] | None = None,
    answer: str = "",
    sources: list[dict[str, Any]] | None = None,
    hits: list[tuple[str, str]] | None = None,
    topic: str | None = None,
) -> TurnTrace:
    question = message_store_user(conversation=conversation, text=text)
    trace = TurnTrace.objects.create(
        message=question,
        masked_question=text,
        masked_window=window or [],
        rewrite={"backend": "rules", "policy": POLICY, "queries": queries, "topic": topic},
        search={
            "queries": queries,
            "hits": [
                {"chunk": 500 + i, "document": d, "title": t, "score": 0.03, "found_by": []}
                for i, (d, t) in enumerate(hits or [])
            ],
            "passages": [],
        },
    )
    Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=answer or "ok",
        reply_to=question,
        sources=sources or [],
        status=Message.Status.COMPLETE,
    )
    return trace


FOLLOW_UP_QUERIES = [
    {
        "text": "vale-refeição estagiários",
        "type": "expand",
        "weight": 1.0,
        "area": None,
        "reading": "contextual",
    },
    {"text": "e para estagiários?", "type": "original", "weight": 0.5, "area": None},
]
WINDOW = [
    {"role": "user", "text": "como funciona o vale-refeição?"},
    {"role": "assistant", "text": "O vale-refeição é pago por dia útil [1]."},
]


@pytest.fixture
def follow_up(personas: dict[str, User]) -> RewriteFidelity:
    conversation = conversation_create(user=personas["ana"])
    _turn(conversation, "como funciona o vale-refeição?", queries=[], answer=WINDOW[1]["text"])
    trace = _turn(
        conversation,
        "e para estagiários?",
        queries=FOLLOW_UP_QUERIES,
        window=WINDOW,
        topic="vale-refeição",
    )
    return RewriteFidelity.objects.create(message=trace.message, policy=POLICY)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _page(user: User, item: RewriteFidelity) -> str:
    response = _client(user).get(reverse("admin:quality_rewritefidelity_change", args=[item.pk]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_the_page_shows_the_question_the_window_and_the_queries_side_by_side(
    follow_up: RewriteFidelity,
) -> None:
    rui = _staff("rui", rights=JUDGE)
    html = _page(rui, follow_up)
    original = html.index('class="fidelity-original"')
    window = html.index('class="fidelity-window"')
    queries = html.index('class="fidelity-queries"')
    assert original < window < queries
    assert "e para estagiários?" in html[original:window]
    assert "como funciona o vale-refeição?" in html[window:queries]
    assert "O vale-refeição é pago por dia útil [1]." in html[window:queries]
    rows = html[queries:].split('class="fidelity-query"')[1:]
    assert len(rows) == 2
    # Each query with its type, weight and why it was searched.
    assert "vale-refeição estagiários" in rows[0] and "<code>expand</code>" in rows[0]
    assert re.search(r"<td>1[.,]0</td>", rows[0])  # the weight, as the locale writes it
    assert "the turn read with the conversation&#x27;s topic" in rows[0]
    assert "(vale-refeição)" in rows[0]
    assert "<code>original</code>" in rows[1] and re.search(r"<td>0[.,]5</td>", rows[1])
    assert "the user&#x27;s own words" in rows[1]
    assert POLICY in html
    assert 'name="verdict" value="faithful"' in html
    assert 'name="verdict" value="unfaithful"' in html
    # Opening it is recorded, like opening the turn.
    assert StaffAccessLog.objects.filter(
        user=rui, view="rewrite fidelity review", conversation=follow_up.message.conversation
    ).exists()


@pytest.mark.django_db
def test_marking_needs_the_change_permission(follow_up: RewriteFidelity) -> None:
    vera = _staff("vera", rights=READ_ONLY)
    html = _page(vera, follow_up)
    assert 'name="verdict"' not in html and "verdict-form" not in html
    url = reverse("admin:quality_rewritefidelity_verdict", args=[follow_up.pk])
    response = _client(vera).post(url, {"verdict": "faithful"})
    assert response.status_code == 403
    # Nor through the admin's own form.
    change = reverse("admin:quality_rewritefidelity_change", args=[follow_up.pk])
    assert _client(vera).post(change, {"verdict": "faithful"}).status_code == 403
    follow_up.refresh_from_db()
    assert follow_up.verdict == "pending" and follow_up.reviewer is None
    # Staff without the view permission do not see the queue at all.
    nobody = _staff("nobody", rights=["view_turntrace"])
    listing = reverse("admin:quality_rewritefidelity_changelist")
    assert _client(nobody).get(listing).status_code == 403


@pytest.mark.django_db
def test_a_reviewer_marks_a_rewrite_and_goes_on_to_the_next(
    follow_up: RewriteFidelity, personas: dict[str, User]
) -> None:
    rui = _staff("rui", rights=JUDGE)
    other = RewriteFidelity.objects.create(
        message=_question(personas["carlos"], "e no Chile?"), policy=POLICY
    )
    TurnTrace.objects.create(message=other.message, masked_question="e no Chile?")
    url = reverse("admin:quality_rewritefidelity_verdict", args=[follow_up.pk])
    assert _client(rui).get(url).status_code == 405
    response = _client(rui).post(
        url, {"verdict": "unfaithful", "note": f"perdeu o assunto; avisar {EMAIL}"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:quality_rewritefidelity_change", args=[other.pk])
    follow_up.refresh_from_db()
    assert (follow_up.verdict, follow_up.reviewer) == ("unfaithful", rui)
    assert follow_up.reviewed_at is not None
    # The note is masked as the turn was: the address never stored.
    assert "perdeu o assunto" in follow_up.note and EMAIL not in follow_up.note
    html = _page(rui, follow_up)
    assert "perdeu o assunto" in html and "judged" in html
    # A verdict that is neither is refused with its reason; nothing changes.
    bad = _client(rui).post(url, {"verdict": "maybe"}, follow=True)
    assert "a verdict is faithful or unfaithful" in bad.content.decode().lower()
    follow_up.refresh_from_db()
    assert follow_up.verdict == "unfaithful"
    # The queue lists what waits: the other rewrite, not this one.
    listing = _client(rui).get(reverse("admin:quality_rewritefidelity_changelist")).content
    assert b"e no Chile?" in listing and b"e para estagi" not in listing


@pytest.mark.django_db
def test_a_deleted_conversation_leaves_its_verdict_and_nothing_to_judge(
    follow_up: RewriteFidelity, personas: dict[str, User]
) -> None:
    rui = _staff("rui", rights=JUDGE)
    rewrite_fidelity_judge(item=follow_up, verdict="faithful", reviewer=rui)
    pending = RewriteFidelity.objects.create(
        message=_question(personas["ana"], "outra?"), policy=POLICY
    )
    assert fidelity_pending_count() == 1
    Conversation.objects.all().delete()  # retention
    follow_up.refresh_from_db()
    pending.refresh_from_db()
    assert follow_up.message is None and follow_up.verdict == "faithful"
    assert fidelity_pending_count() == 0
    assert [w.judged for w in fidelity_weeks()] == [1]
    html = _page(rui, pending)
    assert "nothing is left to judge" in html and 'name="verdict"' not in html
    with pytest.raises(FidelityError, match="deleted"):
        rewrite_fidelity_judge(item=pending, verdict="faithful", reviewer=rui)


# --- restricted documents ---------------------------------------------------------------------


@pytest.fixture
def restricted_window(personas: dict[str, User]) -> RewriteFidelity:
    """Rita (in the group) asked about salary bands; the answer cites the restricted table,
    and her follow-up's window and queries carry it."""
    collection = default_collection()
    salary = Document.objects.create(
        collection=collection, external_id=SALARY_ID, title=SALARY_TITLE, checksum="s"
    )
    salary.groups.add(Group.objects.get(name=RESTRICTED))
    Document.objects.create(
        collection=collection, external_id=PUBLIC_ID, title=PUBLIC_TITLE, checksum="p"
    )
    conversation = conversation_create(user=personas["rita"])
    answer = f"A faixa vai de {SALARY_FACT} [1]."
    _turn(
        conversation,
        "qual a faixa do nível 3?",
        queries=[{"text": "faixa nível 3", "type": "normalize", "weight": 1.0}],
        answer=answer,
        sources=[{"n": 1, "document_id": salary.pk, "title": SALARY_TITLE, "section": "III"}],
        hits=[(SALARY_ID, SALARY_TITLE)],
    )
    trace = _turn(
        conversation,
        "e para o nível 4?",
        queries=[
            {"text": f"{SALARY_TITLE} nível 4", "type": "expand", "weight": 1.0},
            {"text": "e para o nível 4?", "type": "original", "weight": 0.5},
        ],
        window=[
            {"role": "user", "text": "qual a faixa do nível 3?"},
            {"role": "assistant", "text": answer},
        ],
        hits=[(SALARY_ID, SALARY_TITLE), (PUBLIC_ID, PUBLIC_TITLE)],
        topic=SALARY_TITLE,
    )
    return RewriteFidelity.objects.create(message=trace.message, policy=POLICY)


@pytest.mark.django_db
def test_restricted_text_is_hidden_from_a_reviewer_outside_the_group(
    restricted_window: RewriteFidelity,
) -> None:
    vera = _staff("vera", rights=JUDGE)
    html = _page(vera, restricted_window)
    for secret in SECRETS:
        assert secret not in html, secret
    # The window's answer and the derived queries are hidden whole (issue 38, finding 3: the
    # expanded query carries words of a restricted document after a hidden answer).
    assert html.count(PLACEHOLDER_PASSAGE) >= 2
    assert "e para o nível 4?" in html  # the question itself is hers to judge
    listing = _client(vera).get(reverse("admin:quality_rewritefidelity_changelist"))
    assert "e para o nível 4?" in listing.content.decode()
    for secret in SECRETS:
        assert secret not in listing.content.decode(), secret
    # A member of the group sees it all.
    helena = _staff("helena", rights=JUDGE, group=True)
    member = _page(helena, restricted_window)
    assert SALARY_FACT in member and f"{SALARY_TITLE} nível 4" in member


# --- the rate beside the evaluation runs ------------------------------------------------------


def _judged(policy: str, verdict: str, when: Any, user: User) -> RewriteFidelity:
    item = RewriteFidelity.objects.create(policy=policy)
    RewriteFidelity.objects.filter(pk=item.pk).update(
        verdict=verdict, created_at=when, reviewed_at=when, reviewer=user
    )
    return item


@pytest.mark.django_db
def test_the_rate_per_week_and_policy_is_computed_from_the_verdicts(
    personas: dict[str, User],
) -> None:
    rui = _staff("rui", rights=JUDGE + ["view_evaluationrun"])
    monday = timezone.localdate() - timedelta(days=timezone.localdate().weekday())
    # A Tuesday morning, two weeks back.
    two_weeks_ago = timezone.make_aware(datetime.combine(monday - timedelta(days=13), time(10)))
    last_week = two_weeks_ago + timedelta(days=7)
    for verdict in ("faithful", "faithful", "faithful", "unfaithful"):
        _judged("rules-a", verdict, two_weeks_ago, rui)
    for verdict in ("faithful", "unfaithful"):
        _judged("llm-b", verdict, two_weeks_ago, rui)
    for verdict in ("faithful", "faithful"):
        _judged("rules-a", verdict, last_week, rui)
    # Waiting for a verdict: not in the rate.
    RewriteFidelity.objects.create(policy="rules-a", message=_question(personas["ana"]))
    weeks = fidelity_weeks()
    first, second = monday - timedelta(days=14), monday - timedelta(days=7)
    assert weeks == [
        FidelityWeek(first, "llm-b", 1, 2),
        FidelityWeek(first, "rules-a", 3, 4),
        FidelityWeek(second, "rules-a", 2, 2),
    ]
    report = fidelity_chart(weeks)
    assert report.series == ("all", "llm-b", "rules-a")
    values = {s.mode: [round(p.value, 4) for p in s.points] for s in report.chart.series}
    assert values == {"all": [0.6667, 1.0], "llm-b": [0.5], "rules-a": [0.75, 1.0]}
    # Heights follow the rates on the chart's 0..1 axis.
    chart = report.chart
    rules = next(s for s in chart.series if s.mode == "rules-a")
    assert rules.points[0].y == round(chart.bottom - 0.75 * (chart.bottom - chart.top), 1)
    # The page of the evaluation runs shows it, counts included.
    html = _client(rui).get(reverse("admin:quality_evaluationrun_changelist")).content.decode()
    section = html[html.index('id="fidelity"') :]
    assert 'data-metric="fidelity"' in section
    # Coordinates as SVG reads them, whatever the page's language (pt-br wrote "44,0").
    svg = section[section.index("<svg") : section.index("</svg>")]
    coordinates = re.findall(r'\s(?:cx|cy|x|y|x1|x2|y1|y2)="([^"]*)"', svg)
    assert coordinates and all(re.fullmatch(r"-?\d+(\.\d+)?", c) for c in coordinates)
    cells = re.findall(r'fidelity-rate">([\d.,]+)</span> <small[^>]*>\((\d+) / (\d+)\)', section)
    # Week by week, one cell per series: all, llm-b, rules-a (a week without any: none).
    shown = [(rate.replace(",", "."), int(f), int(j)) for rate, f, j in cells]
    assert shown == [
        ("0.67", 4, 6),
        ("0.50", 1, 2),
        ("0.75", 3, 4),
        ("1.00", 2, 2),
        ("1.00", 2, 2),
    ]
    assert "1 rewrite is waiting" in section


def test_one_policy_is_charted_once() -> None:
    week = timezone.localdate()
    report = fidelity_chart([FidelityWeek(week, "rules-a", 1, 4)])
    assert report.series == ("all",)
    assert [p.value for p in report.chart.series[0].points] == [0.25]
    assert fidelity_chart([]).empty


@pytest.mark.django_db
def test_staff_without_the_fidelity_view_permission_see_only_the_runs(
    personas: dict[str, User],
) -> None:
    ivo = _staff("ivo", rights=["view_evaluationrun"])
    html = _client(ivo).get(reverse("admin:quality_evaluationrun_changelist")).content.decode()
    assert "Quality over time" in html and 'id="fidelity"' not in html
