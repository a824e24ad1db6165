"""Staff see a restricted document's text only if they may read it themselves (issue 14,
finding 4).

The attack: a staff member with view rights on conversations but not in `rh-restrito` read a
restricted salary table in a user's answer on the timeline, and the retry page showed
restricted titles. Each staff page is opened here by Vera (staff, view rights, not in the
group), Helena (the same rights, in the group) and a superuser.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Feedback, Message, TurnTrace
from conversations.quality.models import EvalCase, EvaluationRun
from conversations.services import conversation_create, message_store_user
from retrieval.models import Document
from retrieval.services import default_collection
from tests.conftest import RESTRICTED

pytestmark = pytest.mark.django_db

SALARY_ID = "pt/faixas-salariais-2026"
SALARY_TITLE = "Faixas salariais 2026"
SALARY_SECTION = "Analista III"
SALARY_FACT = "R$ 9.800 a R$ 13.200"
PUBLIC_ID = "pt/ferias-regras-gerais"
PUBLIC_TITLE = "Férias: regras gerais"
PLACEHOLDER_DOCUMENT = "[restricted document]"
PLACEHOLDER_PASSAGE = "[restricted passage]"
# Nothing of the restricted document may reach Vera's pages.
SECRETS = (SALARY_ID, SALARY_TITLE, SALARY_SECTION, SALARY_FACT, "13.200")

REVIEW_RIGHTS = ["view_conversation", "view_turntrace", "view_attentionturn", "view_feedback"]


def _staff(name: str, *, rights: list[str], group: bool = False) -> User:
    user = User.objects.create_user(name, password=f"pw-{name}-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=rights))
    if group:
        user.groups.add(Group.objects.get(name=RESTRICTED))
    return user


@pytest.fixture
def documents(personas: dict[str, User]) -> dict[str, Document]:
    collection = default_collection()
    salary = Document.objects.create(
        collection=collection, external_id=SALARY_ID, title=SALARY_TITLE, checksum="s"
    )
    salary.groups.add(Group.objects.get(name=RESTRICTED))
    public = Document.objects.create(
        collection=collection, external_id=PUBLIC_ID, title=PUBLIC_TITLE, checksum="p"
    )
    return {"salary": salary, "public": public}


@dataclass
class Talk:
    conversation: Conversation
    first: TurnTrace
    follow_up: TurnTrace
    clarify: TurnTrace


def _turn(
    conversation: Conversation,
    text: str,
    *,
    hits: list[tuple[str, str]],
    answer: str,
    sources: list[dict[str, Any]],
    window: list[dict[str, str]] | None = None,
    rewrite: dict[str, Any] | None = None,
    status: str = Message.Status.COMPLETE,
) -> TurnTrace:
    question = message_store_user(conversation=conversation, text=text)
    trace = TurnTrace.objects.create(
        message=question,
        masked_question=text,
        masked_window=window or [],
        rewrite={"backend": "rules", **(rewrite or {})},
        search={
            "queries": [{"text": text, "type": "original", "weight": 1.0}],
            "hits": [
                {
                    "chunk": 500 + i,
                    "document": doc,
                    "title": title,
                    "score": 0.03,
                    "found_by": [
                        {"query": 0, "rank": i + 1, "vector_rank": 9, "text_rank": 9, "score": 0.03}
                    ],
                }
                for i, (doc, title) in enumerate(hits)
            ],
            "passages": [500],
        },
        timings_ms={"to_done": 800.0},
        clarified=bool((rewrite or {}).get("needs_clarification")),
    )
    Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=answer,
        reply_to=question,
        sources=sources,
        status=status,
    )
    return trace


@pytest.fixture
def talk(personas: dict[str, User], documents: dict[str, Document]) -> Talk:
    """Rita (in the group) asks about salary bands; the answer cites the restricted table."""
    rita = personas["rita"]
    salary, public = documents["salary"], documents["public"]
    conversation = conversation_create(user=rita)
    answer = f"A faixa do {SALARY_SECTION} vai de {SALARY_FACT} [1]."
    first = _turn(
        conversation,
        "qual a faixa do nível 3?",
        hits=[(SALARY_ID, SALARY_TITLE), (PUBLIC_ID, PUBLIC_TITLE)],
        answer=answer,
        sources=[
            {"n": 1, "document_id": salary.pk, "title": SALARY_TITLE, "section": SALARY_SECTION},
            {"n": 2, "document_id": public.pk, "title": PUBLIC_TITLE, "section": "Prazo"},
        ],
    )
    Feedback.objects.create(
        message=Message.objects.get(reply_to=first.message),
        user=rita,
        value=-1,
        reason=f"o {SALARY_SECTION} ganha isso mesmo?",
    )
    follow_up = _turn(
        conversation,
        "e as férias?",
        hits=[(PUBLIC_ID, PUBLIC_TITLE)],
        answer="São 30 dias por ano [1].",
        sources=[{"n": 1, "document_id": public.pk, "title": PUBLIC_TITLE, "section": "Prazo"}],
        window=[
            {"role": "user", "text": "qual a faixa do nível 3?"},
            {"role": "assistant", "text": answer},
        ],
    )
    # A clarification offers titles as options; it has no sources.
    clarify = _turn(
        conversation,
        "e isso?",
        hits=[(SALARY_ID, SALARY_TITLE), (PUBLIC_ID, PUBLIC_TITLE)],
        answer=f"Você quer saber de {SALARY_TITLE} ou de {PUBLIC_TITLE}?",
        sources=[],
        rewrite={
            "needs_clarification": True,
            "clarification": {
                "question": f"{SALARY_TITLE} ou {PUBLIC_TITLE}?",
                "options": [SALARY_TITLE, PUBLIC_TITLE],
            },
            "notes": [f"evidence: the question's readings split across {SALARY_TITLE}"],
        },
        status=Message.Status.CLARIFY,
    )
    return Talk(conversation, first, follow_up, clarify)


@pytest.fixture
def vera(personas: dict[str, User]) -> User:
    """Staff with view rights on the review pages, not in the restricted group."""
    return _staff("vera", rights=REVIEW_RIGHTS)


@pytest.fixture
def helena(personas: dict[str, User]) -> User:
    """The same rights as Vera, and a member of the restricted group."""
    return _staff("helena", rights=REVIEW_RIGHTS, group=True)


@pytest.fixture
def boss(db: None) -> User:
    return User.objects.create_superuser("boss", password="pw-boss-123")


def _get(user: User, url: str, **params: Any) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url, params)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def _assert_hidden(html: str) -> None:
    for secret in SECRETS:
        assert secret not in html, secret


# --- the timeline and the turn's page ---------------------------------------------------------


def test_timeline_hides_restricted_text_from_staff_outside_the_group(
    talk: Talk, vera: User
) -> None:
    url = reverse("admin:conversations_conversation_change", args=[talk.conversation.pk])
    html = _get(vera, url)
    _assert_hidden(html)
    assert PLACEHOLDER_DOCUMENT in html and PLACEHOLDER_PASSAGE in html
    # What Vera may read stays: the public document, its answer, the flags and timings.
    assert PUBLIC_TITLE in html and PUBLIC_ID in html
    assert "São 30 dias por ano" in html
    assert "thumbs down" in html and "clarification asked" in html


@pytest.mark.parametrize("who", ["helena", "boss"])
def test_timeline_shows_restricted_text_to_group_members_and_superusers(
    talk: Talk, helena: User, boss: User, who: str
) -> None:
    user = {"helena": helena, "boss": boss}[who]
    url = reverse("admin:conversations_conversation_change", args=[talk.conversation.pk])
    html = _get(user, url)
    for secret in SECRETS:
        assert secret in html, secret
    assert PLACEHOLDER_DOCUMENT not in html and PLACEHOLDER_PASSAGE not in html


@pytest.mark.parametrize("turn", ["first", "follow_up", "clarify"])
def test_turn_page_hides_restricted_text_from_staff_outside_the_group(
    talk: Talk, vera: User, helena: User, turn: str
) -> None:
    trace: TurnTrace = getattr(talk, turn)
    url = reverse("admin:conversations_turntrace_change", args=[trace.pk])
    html = _get(vera, url)
    _assert_hidden(html)
    # The follow-up's window repeats the first answer: hidden too.
    assert PLACEHOLDER_PASSAGE in html or PLACEHOLDER_DOCUMENT in html
    member = _get(helena, url)
    assert SALARY_TITLE in member or SALARY_FACT in member


def test_lists_and_panel_show_no_restricted_text(talk: Talk, vera: User, helena: User) -> None:
    for name in ("conversation", "turntrace", "attentionturn", "feedback"):
        _assert_hidden(_get(vera, reverse(f"admin:conversations_{name}_changelist")))
    panel = _get(vera, reverse("admin:conversations_attentionturn_changelist"), review="all")
    assert "qual a faixa do nível 3?" in panel  # the turn is listed, its documents are not
    _assert_hidden(panel)
    # The thumbs-down reason quotes the restricted answer: hidden from Vera, shown to Helena.
    feedback = reverse("admin:conversations_feedback_changelist")
    assert PLACEHOLDER_PASSAGE in _get(vera, feedback)
    assert SALARY_SECTION in _get(helena, feedback)


# --- marking the right documents --------------------------------------------------------------


def test_mark_documents_offers_only_documents_the_staff_member_may_read(
    talk: Talk, vera: User, documents: dict[str, Document]
) -> None:
    vera.user_permissions.add(Permission.objects.get(codename="add_evalcase"))
    url = reverse("admin:conversations_turntrace_mark_documents", args=[talk.follow_up.pk])
    html = _get(vera, url)
    _assert_hidden(html)
    assert PUBLIC_TITLE in html  # the public document is offered
    first = reverse("admin:conversations_turntrace_mark_documents", args=[talk.first.pk])
    assert "1 retrieved document you may not read is not offered" in _get(vera, first)
    # A forged post naming the restricted document saves nothing.
    client = Client()
    client.force_login(vera)
    for data in ({"retrieved": [SALARY_ID]}, {"others": [documents["salary"].pk]}):
        response = client.post(first, {"question": "faixa?", "category": "standalone", **data})
        assert response.status_code == 200 and not EvalCase.objects.exists()
    # The case saved from the follow-up keeps the window without the restricted answer.
    client.post(
        url, {"question": "e as férias?", "category": "follow-up", "retrieved": [PUBLIC_ID]}
    )
    case = EvalCase.objects.get()
    assert [d.external_id for d in case.relevant_documents.all()] == [PUBLIC_ID]
    assert SALARY_FACT not in str(case.history) and PLACEHOLDER_PASSAGE in str(case.history)


def test_saving_a_case_marks_the_turn_reviewed_only_with_the_change_permission(
    talk: Talk, vera: User, documents: dict[str, Document]
) -> None:
    """The audit's finding: staff who may add evaluation cases but not change turns marked
    a turn reviewed through "mark the right documents". The case is saved; the turn stays
    open until someone with the change permission reviews it."""
    vera.user_permissions.add(Permission.objects.get(codename="add_evalcase"))
    client = Client()
    client.force_login(vera)
    url = reverse("admin:conversations_turntrace_mark_documents", args=[talk.follow_up.pk])
    data = {"question": "e as férias?", "category": "follow-up", "retrieved": [PUBLIC_ID]}
    assert client.post(url, data).status_code == 302
    assert EvalCase.objects.count() == 1
    assert TurnTrace.objects.get(pk=talk.follow_up.pk).reviewed_at is None
    vera.user_permissions.add(Permission.objects.get(codename="change_turntrace"))
    vera = User.objects.get(pk=vera.pk)  # permissions are cached on the instance
    client.force_login(vera)
    assert client.post(url, data).status_code == 302
    assert TurnTrace.objects.get(pk=talk.follow_up.pk).reviewed_at is not None


# --- the knowledge-base admin -----------------------------------------------------------------


def test_document_admin_lists_and_opens_only_readable_documents(
    documents: dict[str, Document], personas: dict[str, User]
) -> None:
    vera = _staff("vera", rights=["view_document"])
    helena = _staff("helena", rights=["view_document"], group=True)
    changelist = reverse("admin:retrieval_document_changelist")
    html = _get(vera, changelist)
    assert PUBLIC_TITLE in html
    _assert_hidden(html)
    _assert_hidden(_get(vera, changelist, q="faixas"))
    client = Client()
    client.force_login(vera)
    salary = reverse("admin:retrieval_document_change", args=[documents["salary"].pk])
    response = client.get(salary, follow=True)
    _assert_hidden(response.content.decode())
    assert SALARY_TITLE in _get(helena, changelist) and SALARY_TITLE in _get(helena, salary)


def test_evaluation_case_lists_only_readable_documents_and_keeps_the_others(
    documents: dict[str, Document], personas: dict[str, User], boss: User
) -> None:
    vera = _staff("vera", rights=["view_evalcase", "change_evalcase"])
    case = EvalCase.objects.create(collection=default_collection(), question="faixa do nível 3?")
    case.relevant_documents.set([documents["salary"], documents["public"]])
    url = reverse("admin:quality_evalcase_change", args=[case.pk])
    html = _get(vera, url)
    _assert_hidden(html)
    assert PUBLIC_TITLE in html
    _assert_hidden(_get(vera, reverse("admin:quality_evalcase_changelist"), q="faixas"))
    client = Client()
    client.force_login(vera)
    response = client.post(
        url,
        {
            "collection": default_collection().pk,
            "question": "faixa do nível 3?",
            "history": "[]",
            "relevant_documents": [documents["public"].pk],
            "category": EvalCase.Category.STANDALONE,
            "language": "pt",
            "active": "on",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    # Saving what she could see does not unmark what she could not.
    assert set(case.relevant_documents.all()) == {documents["salary"], documents["public"]}
    assert SALARY_TITLE in _get(boss, url)


def test_evaluation_report_shows_restricted_documents_as_placeholders(
    documents: dict[str, Document], personas: dict[str, User]
) -> None:
    vera = _staff("vera", rights=["view_evaluationrun"])
    helena = _staff("helena", rights=["view_evaluationrun"], group=True)
    run = EvaluationRun.objects.create(
        collection=default_collection(),
        source_label="cases",
        modes=["rules"],
        ks=[5],
        status=EvaluationRun.Status.DONE,
        tasks=[{"id": "c1", "question": "faixa do nível 3?"}],
        report={
            "rows": [
                {
                    "id": "c1",
                    "mode": "rules",
                    "relevant": [SALARY_ID, PUBLIC_ID],
                    "ranked": [SALARY_ID],
                    "mrr@10": 1.0,
                }
            ]
        },
    )
    url = reverse("admin:quality_evaluationrun_change", args=[run.pk])
    html = _get(vera, url)
    _assert_hidden(html)
    assert PLACEHOLDER_DOCUMENT in html and PUBLIC_ID in html
    assert SALARY_ID in _get(helena, url)


def test_run_job_and_case_lists_are_no_oracle_on_what_their_pages_hide(
    documents: dict[str, Document], personas: dict[str, User]
) -> None:
    """The second attack: Vera, outside the group, filtered the evaluation runs with
    `?report__icontains=pt/faixas-salariais-2026` and got the run whose report ranked it (a
    made-up id gave none), then read the id a character at a time with
    `?report__rows__0__ranked__0__startswith=`. The same free lookups worked on the ingestion
    jobs' reports and, by the document's number, on the evaluation cases."""
    from retrieval.models import IngestionJob

    vera = _staff("vera", rights=["view_evaluationrun", "view_ingestionjob", "view_evalcase"])
    collection = default_collection()
    EvaluationRun.objects.create(
        collection=collection,
        source_label="probe",
        modes=["rules"],
        ks=[5],
        status=EvaluationRun.Status.DONE,
        tasks=[{"id": "t1", "question": "tabela de faixas salariais"}],
        report={"rows": [{"id": "t1", "mode": "rules", "ranked": [SALARY_ID], "relevant": []}]},
    )
    IngestionJob.objects.create(
        collection=collection,
        status=IngestionJob.Status.DONE,
        report={"errors": [{"document": SALARY_ID, "error": "no text"}]},
    )
    case = EvalCase.objects.create(collection=collection, question="qual a faixa do nível 3?")
    case.relevant_documents.add(documents["salary"])
    client = Client()
    client.force_login(vera)
    probes = {
        "admin:quality_evaluationrun_changelist": [
            "report__icontains={}",
            "report__rows__0__ranked__0__startswith={}",
            "tasks__icontains=faixas",
        ],
        "admin:retrieval_ingestionjob_changelist": ["report__icontains={}"],
        "admin:quality_evalcase_changelist": ["relevant_documents={pk}"],
    }
    for name, lookups in probes.items():
        url = reverse(name)
        for lookup in lookups:
            for secret, pk in ((SALARY_ID, documents["salary"].pk), ("pt/zz-none", 10**9)):
                query = lookup.format(secret, pk=pk)
                response = client.get(f"{url}?{query}")
                # Refused whatever the value: nothing tells a present id from a made-up one.
                assert response.status_code == 400, (url, query, response.status_code)
    # The lists' own filters still work.
    for name, query in (
        ("admin:quality_evaluationrun_changelist", "status__exact=done"),
        ("admin:retrieval_ingestionjob_changelist", f"collection__id__exact={collection.pk}"),
        ("admin:quality_evalcase_changelist", "active__exact=1"),
        ("admin:quality_evaluationrun_changelist", "metric=recall@5"),  # the chart's
    ):
        response = client.get(f"{reverse(name)}?{query}")
        assert response.status_code == 200, (name, query, response.status_code)
        assert "?e=1" not in response.get("Location", "")


# --- retry now (the real pipeline) ------------------------------------------------------------

KB_SALARY_TITLE = "Tabela de faixas salariais e política de reajuste 2026"


@pytest.mark.django_db(transaction=True)
def test_retry_searches_only_what_the_staff_member_may_read_too(
    small_kb: Any, personas: dict[str, User]
) -> None:
    """The retry runs as the author, within the viewer's scope: Vera gets no restricted hit
    (the stored ranking shows it as a placeholder); Helena and a superuser get the author's."""
    from asgiref.sync import async_to_sync

    from conversations.turn import turn_run

    async def ignore(event: dict[str, Any]) -> None:
        return None

    conversation = conversation_create(user=personas["rita"])
    message = message_store_user(
        conversation=conversation, text="qual a faixa salarial e o reajuste de 2026?"
    )
    async_to_sync(turn_run)(message_id=message.id, emit=ignore)
    trace = TurnTrace.objects.get(message=message)
    assert SALARY_ID in str(trace.search)  # Rita may read it, so her turn found it

    url = reverse("admin:conversations_turntrace_retry", args=[trace.pk])
    vera = _staff("vera", rights=REVIEW_RIGHTS)
    html = _get(vera, url)
    for secret in (SALARY_ID, KB_SALARY_TITLE):
        assert secret not in html, secret
    assert PLACEHOLDER_DOCUMENT in html  # "documents then"
    assert "Searched only over documents both you and the author may read" in html

    helena = _staff("helena", rights=REVIEW_RIGHTS, group=True)
    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    for user in (helena, boss):
        page = _get(user, url)
        assert SALARY_ID in page and PLACEHOLDER_DOCUMENT not in page


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_run_searches_only_what_its_starter_may_read(
    small_kb: Any, personas: dict[str, User]
) -> None:
    """The second attack: Vera, outside the group, started a run on a tasks file of her own
    questions ("tabela de faixas salarias e reajuste por merito"); it searched every document,
    and its report ranked "[restricted document]" first: whether restricted text matches any
    words she likes, a statistic over text she may not read. A run now searches as whoever
    started it (the rule of the chat and of "retry now"); a superuser's run, everything."""
    from conversations.quality.runs import evaluation_run_create, evaluation_run_execute

    question = "tabela de faixas salarias e reajuste por merito"
    vera = _staff("vera", rights=["add_evaluationrun", "view_evaluationrun"])
    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    ranked = {}
    for user in (vera, boss):
        run = evaluation_run_create(
            collection=small_kb,
            source=EvaluationRun.Source.FILE,
            source_label="probe",
            tasks=[{"id": "t1", "question": question, "relevant": [PUBLIC_ID]}],
            modes=["rules"],
            ks=[5],
            user=user,
        )
        run = evaluation_run_execute(run_id=run.pk)
        assert run.status == EvaluationRun.Status.DONE, run.error
        ranked[user.username] = run.report["rows"][0]["ranked"]
        html = _get(vera, reverse("admin:quality_evaluationrun_change", args=[run.pk]))
        assert (PLACEHOLDER_DOCUMENT in html) is (user is boss)
    assert SALARY_ID in ranked["boss"][:3]
    assert ranked["vera"] and SALARY_ID not in ranked["vera"]


def test_spelling_fixes_from_restricted_words_are_undone_for_staff_outside_the_group(
    talk: Talk, vera: User, helena: User
) -> None:
    # Rita's "dosie" was corrected to "dossie", a word only a restricted document has.
    trace = _turn(
        talk.conversation,
        "onde fica o dosie?",
        hits=[(PUBLIC_ID, PUBLIC_TITLE)],
        answer="Não encontrei.",
        sources=[],
        rewrite={
            "corrections": {"dosie": "dossie"},
            "notes": ["spelling: 'dosie' -> 'dossie'"],
        },
    )
    trace.search = {
        **trace.search,
        "queries": [{"text": "onde fica o dossie?", "type": "normalize"}],
    }
    trace.save(update_fields=["search"])
    url = reverse("admin:conversations_turntrace_change", args=[trace.pk])
    outside = _get(vera, url)
    assert "dossie" not in outside and "dosie" in outside
    assert "dossie" in _get(helena, url)


@pytest.mark.parametrize(
    "note",
    [
        # The second attack: Vera read this note on Rita's timeline and turn page.
        f"evidence: new topic: the turn alone finds '{SALARY_ID}' confidently, outside the "
        "conversation's documents (both readings agree on it: investigacao)",
        # The document a note names need not be among the turn's stored hits.
        f"evidence: follow-up: the turn alone stays among the conversation's documents "
        f"({SALARY_ID})",
    ],
)
def test_notes_naming_a_restricted_document_by_id_are_scrubbed(
    documents: dict[str, Document], vera: User, helena: User, note: str
) -> None:
    conversation = conversation_create(user=User.objects.get(username="rita"))
    trace = _turn(
        conversation,
        "e as férias?",
        hits=[(PUBLIC_ID, PUBLIC_TITLE)],
        answer="São 30 dias por ano [1].",
        sources=[],
        rewrite={"notes": [note]},
    )
    for url in (
        reverse("admin:conversations_conversation_change", args=[conversation.pk]),
        reverse("admin:conversations_turntrace_change", args=[trace.pk]),
    ):
        html = _get(vera, url)
        _assert_hidden(html)
        assert PLACEHOLDER_DOCUMENT in html
        assert SALARY_ID in _get(helena, url)


def test_an_id_typed_into_the_viewers_own_chat_is_no_oracle(
    documents: dict[str, Document], vera: User
) -> None:
    """The attack: Vera (staff, outside the group) asks in her own chat about guessed
    document ids (file names: "rh/demissao-fulano") and opens her turn on the timeline; the
    id of an existing restricted document came back as "[restricted document]", a made-up
    one as typed."""
    vera.user_permissions.add(Permission.objects.get(codename="view_turntrace"))
    conversation = conversation_create(user=vera)
    made_up = "pt/faixas-salariais-2025"
    for guess in (SALARY_ID, made_up):
        trace = _turn(
            conversation,
            f"o que diz {guess} sobre férias?",
            hits=[(PUBLIC_ID, PUBLIC_TITLE)],
            answer="São 30 dias por ano [1].",
            sources=[],
            rewrite={"notes": [f"may follow up on '{guess}'"]},
        )
        page = _get(vera, reverse("admin:conversations_turntrace_change", args=[trace.pk]))
        assert guess in page and PLACEHOLDER_DOCUMENT not in page, guess
    timeline = _get(
        vera, reverse("admin:conversations_conversation_change", args=[conversation.pk])
    )
    assert SALARY_ID in timeline and made_up in timeline
    assert PLACEHOLDER_DOCUMENT not in timeline


def test_a_clicked_option_is_no_restricted_title_on_the_lists(
    talk: Talk, vera: User, helena: User, documents: dict[str, Document]
) -> None:
    """The attack: Rita clicks the clarification's option, so her next question is the
    restricted title. Its turn page hid it; the turn list, the attention panel, the
    conversation list and the timeline's heading showed it to Vera. A conversation whose
    first question it is takes it as its title."""
    for conversation in (talk.conversation, conversation_create(user=talk.conversation.owner)):
        trace = _turn(
            conversation,
            SALARY_TITLE,
            hits=[(SALARY_ID, SALARY_TITLE)],
            answer=f"A faixa do {SALARY_SECTION} vai de {SALARY_FACT} [1].",
            sources=[{"n": 1, "document_id": documents["salary"].pk, "title": SALARY_TITLE}],
        )
        Feedback.objects.create(
            message=Message.objects.get(reply_to=trace.message), user=conversation.owner, value=-1
        )
        conversation.refresh_from_db()
    assert SALARY_TITLE in conversation.title
    pages = [
        reverse(f"admin:conversations_{name}_changelist")
        for name in ("conversation", "turntrace", "attentionturn")
    ]
    pages.append(reverse("admin:conversations_conversation_change", args=[conversation.pk]))
    for page in pages:
        params = {"review": "all"} if "attention" in page else {}
        html = _get(vera, page, **params)
        _assert_hidden(html)
        assert PLACEHOLDER_DOCUMENT in html, page
        assert SALARY_TITLE in _get(helena, page, **params), page


def test_an_evaluation_case_marked_by_a_group_member_keeps_its_answers_from_vera(
    talk: Talk, documents: dict[str, Document], boss: User
) -> None:
    """The attack: Helena (in the group) marks the right documents of Rita's follow-up, whose
    window holds the restricted answer; Vera (view and change rights on evaluation cases,
    outside the group) read that answer in the case's history."""
    helena = _staff("helena", rights=[*REVIEW_RIGHTS, "add_evalcase", "view_evalcase"], group=True)
    vera = _staff("vera", rights=["view_evalcase", "change_evalcase"])
    client = Client()
    client.force_login(helena)
    response = client.post(
        reverse("admin:conversations_turntrace_mark_documents", args=[talk.follow_up.pk]),
        {"question": "e as férias?", "retrieved": [PUBLIC_ID], "category": "follow-up"},
    )
    assert response.status_code == 302
    case = EvalCase.objects.get()
    assert SALARY_FACT in json.dumps(case.history, ensure_ascii=False)
    url = reverse("admin:quality_evalcase_change", args=[case.pk])
    html = _get(vera, url)
    _assert_hidden(html)
    assert PLACEHOLDER_PASSAGE in html
    assert "qual a faixa do nível 3?" in html  # Rita's own question stays
    _assert_hidden(_get(vera, reverse("admin:quality_evalcase_changelist")))
    assert SALARY_FACT in _get(helena, url) and SALARY_FACT in _get(boss, url)
    # Saving the case from her page leaves the history as it was.
    client.force_login(vera)
    response = client.post(
        url,
        {
            "collection": default_collection().pk,
            "relevant_documents": [documents["public"].pk],
            "category": EvalCase.Category.FOLLOW_UP,
            "language": "pt",
            "active": "on",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    case.refresh_from_db()
    assert SALARY_FACT in json.dumps(case.history, ensure_ascii=False)
    assert case.question == "e as férias?"


# --- issue 38, finding 3: text derived from a restricted document --------------------------

CARRIED = "faixas salariais"  # words of the restricted title, not the whole title


@pytest.mark.parametrize("answered", [True, False])
def test_a_topic_carried_from_a_clicked_restricted_title_is_hidden_from_staff_outside_the_group(
    talk: Talk, vera: User, helena: User, documents: dict[str, Document], answered: bool
) -> None:
    """The attack: Rita (in the group) clicks the restricted title offered as a clarification
    option and asks a follow-up; the rules carry the title's words into the follow-up's
    queries, notes and topic, and Vera (staff, outside the group) read them on the timeline,
    the turn's page and the rewrite fidelity page. The words are not the whole title, so
    replacing titles missed them. Whether or not the clicked turn found an answer (a hidden
    answer is a second way the words arrive), the follow-up's derived text is hidden."""
    salary = documents["salary"]
    _turn(
        talk.conversation,
        SALARY_TITLE,
        hits=[(SALARY_ID, SALARY_TITLE)],
        answer=f"A faixa do {SALARY_SECTION} vai de {SALARY_FACT} [1]." if answered else "?",
        sources=[{"n": 1, "document_id": salary.pk, "title": SALARY_TITLE}] if answered else [],
    )
    follow_up = _turn(
        talk.conversation,
        "e para estagiários?",
        hits=[(PUBLIC_ID, PUBLIC_TITLE)],
        answer="Não encontrei.",
        sources=[],
        rewrite={
            "topic": CARRIED,
            "notes": [
                f"carry_topic: follow-up (ellipsis 'e'): carried '{CARRIED}' from the previous "
                "user turn"
            ],
            "queries": [{"text": f"{CARRIED} estagiários", "type": "expand", "weight": 1.0}],
        },
    )
    follow_up.search = {
        **follow_up.search,
        "queries": [
            {"text": "e para estagiários?", "type": "original", "weight": 1.0},
            {"text": f"{CARRIED} estagiários", "type": "expand", "weight": 1.0},
        ],
    }
    follow_up.save(update_fields=["search"])
    pages = [
        reverse("admin:conversations_conversation_change", args=[talk.conversation.pk]),
        reverse("admin:conversations_turntrace_change", args=[follow_up.pk]),
    ]
    for url in pages:
        html = _get(vera, url)
        _assert_hidden(html)
        assert CARRIED not in html.casefold(), url
        assert "e para estagiários?" in html  # Rita's own words stay
        assert CARRIED in _get(helena, url).casefold(), url


# --- issue 38, finding 4: the admin's search is no oracle on hidden text -----------------------


def _search_count(user: User, name: str, q: str) -> int:
    client = Client()
    client.force_login(user)
    params = {"q": q, **({"review": "all"} if name == "attentionturn" else {})}
    response = client.get(reverse(f"admin:conversations_{name}_changelist"), params)
    assert response.status_code == 200
    return int(response.context["cl"].result_count)


@pytest.mark.parametrize("name", ["conversation", "turntrace", "attentionturn"])
def test_the_admin_search_never_matches_a_title_the_viewer_sees_as_a_placeholder(
    talk: Talk, vera: User, helena: User, name: str
) -> None:
    """The attack: Rita clicked the restricted title (her question is the title); Vera
    (staff, outside the group) searched `?q=<the title>` and got "1 result" while the row
    showed [restricted document], so the title could be guessed word by word."""
    trace = _turn(
        talk.conversation,
        SALARY_TITLE,
        hits=[(SALARY_ID, SALARY_TITLE)],
        answer="?",
        sources=[],
    )
    Feedback.objects.create(
        message=Message.objects.get(reply_to=trace.message), user=talk.conversation.owner, value=-1
    )
    for q in (SALARY_TITLE, "salariais", f'"{SALARY_TITLE}"'):
        assert _search_count(vera, name, q) == 0, q
        assert _search_count(helena, name, q) >= 1, q
    # What Vera may read is still found: Rita's own words, and her username.
    assert _search_count(vera, name, "nível 3") >= 1
    assert _search_count(vera, name, "rita") >= 1


def test_the_evaluation_case_search_never_matches_a_title_the_viewer_sees_as_a_placeholder(
    documents: dict[str, Document], personas: dict[str, User]
) -> None:
    """A case saved by a member of the group from a clicked option has the restricted title
    as its question; the list shows Vera the placeholder, and its search found it."""
    case = EvalCase.objects.create(
        collection=default_collection(),
        question=SALARY_TITLE,
        history_documents=[documents["salary"].pk],
        category=EvalCase.Category.FOLLOW_UP,
        language="pt",
    )
    vera = _staff("vera", rights=["view_evalcase"])
    helena = _staff("helena", rights=["view_evalcase"], group=True)
    url = reverse("admin:quality_evalcase_changelist")

    def found(user: User, q: str) -> list[int]:
        client = Client()
        client.force_login(user)
        response = client.get(url, {"q": q})
        assert response.status_code == 200
        return [c.pk for c in response.context["cl"].result_list]

    for q in (SALARY_TITLE, "salariais"):
        assert found(vera, q) == [], q
        assert found(helena, q) == [case.pk], q
    assert found(vera, "") == [case.pk]  # listed, with the placeholder


@pytest.mark.parametrize("name", ["conversation", "turntrace"])
def test_a_restricted_title_offered_as_an_option_beyond_the_stored_hits_is_hidden(
    personas: dict[str, User], documents: dict[str, Document], vera: User, helena: User, name: str
) -> None:
    """A clarification offers the best pages' titles; the trace keeps only the best
    TRACE_HITS passages, and a page with many passages can push another page's title out of
    them. The placeholders knew restricted titles only from the stored hits and sources, so
    such an option, the clarification's text naming it, and Rita's click on it were shown to
    Vera whole, and `?q=` found them."""
    conversation = conversation_create(user=personas["rita"])
    clarify = _turn(
        conversation,
        "e a tabela?",
        hits=[(PUBLIC_ID, PUBLIC_TITLE)],  # the restricted page is past the stored hits
        answer=f"Você quer saber de {SALARY_TITLE} ou de {PUBLIC_TITLE}?",
        sources=[],
        rewrite={
            "needs_clarification": True,
            "clarification": {
                "question": f"{SALARY_TITLE} ou {PUBLIC_TITLE}?",
                "options": [SALARY_TITLE, PUBLIC_TITLE],
            },
        },
        status=Message.Status.CLARIFY,
    )
    clicked = _turn(
        conversation, SALARY_TITLE, hits=[(PUBLIC_ID, PUBLIC_TITLE)], answer="?", sources=[]
    )
    pages = [
        reverse("admin:conversations_conversation_change", args=[conversation.pk]),
        reverse("admin:conversations_turntrace_change", args=[clarify.pk]),
        reverse("admin:conversations_turntrace_change", args=[clicked.pk]),
    ]
    for url in pages:
        html = _get(vera, url)
        assert SALARY_TITLE not in html, url
        assert "salariais" not in html.casefold(), url
        assert PUBLIC_TITLE in html or url.endswith(f"/{clicked.pk}/change/"), url
        assert SALARY_TITLE in _get(helena, url), url
    assert _search_count(vera, name, "salariais") == 0
    assert _search_count(helena, name, "salariais") >= 1


def test_an_option_titled_like_a_page_the_viewer_may_read_stays(
    personas: dict[str, User], documents: dict[str, Document], vera: User
) -> None:
    """Only a title no page the viewer may read has is a placeholder: replacing one that a
    readable page shares would tell that a restricted page is titled so too."""
    Document.objects.create(
        collection=default_collection(), external_id="pt/outra", title=SALARY_TITLE, checksum="o"
    )
    conversation = conversation_create(user=personas["rita"])
    clarify = _turn(
        conversation,
        "e a tabela?",
        hits=[(PUBLIC_ID, PUBLIC_TITLE)],
        answer=f"Você quer saber de {SALARY_TITLE} ou de {PUBLIC_TITLE}?",
        sources=[],
        rewrite={
            "needs_clarification": True,
            "clarification": {
                "question": f"{SALARY_TITLE} ou {PUBLIC_TITLE}?",
                "options": [SALARY_TITLE, PUBLIC_TITLE],
            },
        },
        status=Message.Status.CLARIFY,
    )
    html = _get(vera, reverse("admin:conversations_turntrace_change", args=[clarify.pk]))
    assert SALARY_TITLE in html
