"""Quality over time from the admin: evaluation runs on marked cases or an uploaded tasks file,
run by the Celery task (eagerly here), kept, compared per mode and category, and charted."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from conversations.quality.cases import eval_case_create
from conversations.quality.models import EvalCase, EvaluationRun
from conversations.quality.runs import evaluation_run_execute
from retrieval.glossary_io import glossary_import
from retrieval.models import Document

pytestmark = pytest.mark.django_db(transaction=True)

CASES = [
    ("como funciona o TRI?", "pt/trabalho-remoto-integral", "standalone"),
    ("estagiário recebe vale-refeição?", "pt/vale-refeicao-estagiarios", "standalone"),
    ("prazo para pedir reembolso de despesas", "pt/reembolso-de-despesas", "standalone"),
]


@pytest.fixture
def staff_client(client: Client, personas: dict[str, User]) -> Client:
    client.force_login(User.objects.create_superuser("boss", password="pw-boss-123"))
    return client


def _mark_cases(collection: Any) -> None:
    glossary_import(
        collection=collection, data=[{"term": "TRI", "expansion": "trabalho remoto integral"}]
    )
    for question, relevant, category in CASES:
        eval_case_create(
            collection=collection,
            question=question,
            history=[],
            documents=list(Document.objects.filter(external_id=relevant)),
            category=category,
        )
    follow_up = Document.objects.filter(external_id="pt/reembolso-de-despesas-prestadores-pj")
    eval_case_create(
        collection=collection,
        question="e para quem é PJ?",
        history=[
            {"role": "user", "text": "como peço reembolso de despesas?"},
            {"role": "assistant", "text": "Pelo sistema de despesas, com a nota fiscal."},
        ],
        documents=list(follow_up),
        category="follow-up",
    )


def _start(client: Client, **data: Any) -> EvaluationRun:
    before = set(EvaluationRun.objects.values_list("pk", flat=True))
    response = client.post(reverse("admin:quality_evaluationrun_add"), data)
    assert response.status_code == 302, response.context["form"].errors if response.context else ""
    run = EvaluationRun.objects.exclude(pk__in=before).get()
    assert response["Location"] == reverse("admin:quality_evaluationrun_change", args=[run.pk])
    return run


def _points(html: str, mode: str) -> list[int]:
    return [
        int(r)
        for r in re.findall(
            rf'<circle class="point[^"]*"[^>]*data-run="(\d+)" data-mode="{mode}"', html
        )
    ]


def test_evaluation_run_from_the_admin_completes_and_charts_every_run(
    staff_client: Client, small_kb: Any, eager_celery: None
) -> None:
    _mark_cases(small_kb)
    first = _start(
        staff_client, source="cases", collection=small_kb.pk, modes=["none", "rules"], ks="5,10"
    )
    first.refresh_from_db()
    assert first.status == EvaluationRun.Status.DONE, first.error
    assert (first.done, first.total) == (8, 8)
    assert first.source_label == "cases" and first.created_by is not None
    modes = first.report["modes"]
    assert set(modes) == {"none", "rules"}
    assert set(modes["rules"]["by_category"]) == {"standalone", "follow-up"}
    assert modes["rules"]["overall"]["n"] == 4
    # Rewriting (the glossary's TRI, the follow-up's context) beats searching the words typed.
    rows = {(r["id"], r["mode"]): r for r in first.report["rows"]}
    tri = f"case-{EvalCase.objects.get(question=CASES[0][0]).pk}"
    assert rows[(tri, "rules")]["mrr@10"] == 1.0 > rows[(tri, "none")]["mrr@10"]
    assert modes["rules"]["overall"]["mrr@10"] > modes["none"]["overall"]["mrr@10"]

    progress = staff_client.get(reverse("admin:quality_evaluationrun_progress", args=[first.pk]))
    assert progress.json() == {
        "status": "done",
        "done": 8,
        "total": 8,
        "percent": 100,
        "finished": True,
    }

    second = _start(
        staff_client, source="cases", collection=small_kb.pk, modes=["none", "rules"], ks="5"
    )
    page = staff_client.get(reverse("admin:quality_evaluationrun_change", args=[second.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    # The comparison table: recall@k and MRR per category, with and without rewriting.
    assert "With and without rewriting" in html
    assert "recall@5" in html and "mrr@10" in html and "follow-up" in html
    # The chart: one point per finished run on these cases, for each mode.
    assert "<svg" in html and 'class="quality-chart"' in html
    assert _points(html, "rules") == [first.pk, second.pk]
    assert _points(html, "none") == [first.pk, second.pk]
    # Another metric, the same runs.
    recall = staff_client.get(
        reverse("admin:quality_evaluationrun_change", args=[second.pk]), {"metric": "recall@5"}
    )
    assert 'data-metric="recall@5"' in recall.content.decode()
    assert _points(recall.content.decode(), "rules") == [first.pk, second.pk]

    # A message delivered again does not run a finished run twice.
    finished_at = EvaluationRun.objects.get(pk=first.pk).finished_at
    assert evaluation_run_execute(run_id=first.pk).finished_at == finished_at

    # "Run again" from the list: the cases as they are now, same modes.
    changelist = reverse("admin:quality_evaluationrun_changelist")
    staff_client.post(changelist, {"action": "run_again", "_selected_action": [second.pk]})
    third = EvaluationRun.objects.latest("id")
    assert third.pk > second.pk and third.status == EvaluationRun.Status.DONE
    assert third.modes == ["none", "rules"] and third.ks == [5]
    listing = staff_client.get(changelist)
    assert _points(listing.content.decode(), "rules") == [first.pk, second.pk, third.pk]


@pytest.mark.parametrize("stages_on", [False, True], ids=["stages-off", "stages-on-in-settings"])
def test_evaluation_run_on_an_uploaded_tasks_file(
    staff_client: Client, small_kb: Any, eager_celery: None, settings: Any, stages_on: bool
) -> None:
    # A run compares rewrite modes only: the model stages switched on for the turns stay
    # out of it (`manage.py evaluate --stages` measures them), so its rows keep their modes.
    settings.CHATRAG_HYDE = settings.CHATRAG_RERANK = stages_on
    lines = [
        {
            "id": "t1",
            "question": "quantos dias de férias eu tenho por ano",
            "relevant": ["pt/ferias-regras-gerais"],
            "category": "standalone",
        },
        {
            "id": "t2",
            "history": [{"role": "user", "text": "quero pedir demissão"}],
            "question": "e se eu estiver de férias?",
            "relevant": ["pt/pedido-de-demissao-durante-ferias"],
            "category": "follow-up",
        },
    ]
    upload = SimpleUploadedFile(
        "tasks.jsonl", "\n".join(json.dumps(line, ensure_ascii=False) for line in lines).encode()
    )
    run = _start(
        staff_client,
        source="file",
        tasks_file=upload,
        collection=small_kb.pk,
        modes=["none", "rules"],
        ks="5",
    )
    run.refresh_from_db()
    assert run.status == EvaluationRun.Status.DONE, run.error
    assert run.source_label == "tasks.jsonl" and len(run.tasks) == 2
    html = staff_client.get(
        reverse("admin:quality_evaluationrun_change", args=[run.pk])
    ).content.decode()
    assert _points(html, "rules") == [run.pk]
    assert "quantos dias de férias eu tenho por ano" in html
    assert sorted({row["mode"] for row in run.report["rows"]}) == ["none", "rules"]
    assert sorted(run.report["modes"]) == ["none", "rules"]


def test_a_bad_tasks_file_or_no_cases_start_nothing(
    staff_client: Client, small_kb: Any, eager_celery: None
) -> None:
    url = reverse("admin:quality_evaluationrun_add")
    bad = SimpleUploadedFile("tasks.jsonl", b'{"question": ""}\n')
    response = staff_client.post(
        url,
        {
            "source": "file",
            "tasks_file": bad,
            "collection": small_kb.pk,
            "modes": ["none"],
            "ks": "5",
        },
    )
    assert response.status_code == 200
    assert "question" in str(response.context["form"].errors)
    response = staff_client.post(
        url, {"source": "cases", "collection": small_kb.pk, "modes": ["none"], "ks": "5"}
    )
    assert response.status_code == 200 and "no tasks" in response.content.decode()
    assert not EvaluationRun.objects.exists()


def test_a_run_too_big_for_the_worker_is_refused_with_its_size(
    staff_client: Client, small_kb: Any, eager_celery: None, settings: Any
) -> None:
    # A run holds the Celery worker that also ingests documents until it ends (3,000 tasks
    # held it 15 minutes): past the limit, the form says why and nothing is queued.
    settings.CHATRAG_EVAL_MAX_TURNS = 5
    line = {"question": "quantos dias de férias?", "relevant": ["pt/ferias-regras-gerais"]}
    body = "\n".join(json.dumps(line | {"id": f"t{i}"}, ensure_ascii=False) for i in range(3))
    data = {"source": "file", "collection": small_kb.pk, "modes": ["none", "rules"], "ks": "5"}
    response = staff_client.post(
        reverse("admin:quality_evaluationrun_add"),
        data | {"tasks_file": SimpleUploadedFile("tasks.jsonl", body.encode())},
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "6 turns (3 tasks x 2 modes)" in page and "CHATRAG_EVAL_MAX_TURNS" in page
    assert not EvaluationRun.objects.exists()
    run = _start(
        staff_client,
        **data | {"modes": ["rules"], "tasks_file": SimpleUploadedFile("t.jsonl", body.encode())},
    )
    assert run.total == 3


def test_llm_mode_is_offered_only_with_a_chat_model(
    staff_client: Client, small_kb: Any, settings: Any
) -> None:
    form = staff_client.get(reverse("admin:quality_evaluationrun_add")).context["form"]
    assert [c for c, _ in form.fields["modes"].choices] == ["none", "last-turn", "rules"]
    settings.CHATRAG_LLM_BACKEND = "retrieval.pipeline.llm.OllamaChat"
    form = staff_client.get(reverse("admin:quality_evaluationrun_add")).context["form"]
    assert "llm" in [c for c, _ in form.fields["modes"].choices]


def test_the_old_addresses_of_the_evaluation_pages_lead_to_them(staff_client: Client) -> None:
    """The pages moved from /admin/retrieval/ to /admin/quality/ with their models: an old
    address (a bookmark) redirects to the same page, a form posted there is posted again."""
    changelist = reverse("admin:quality_evaluationrun_changelist")
    old = staff_client.get("/admin/retrieval/evaluationrun/?status__exact=done")
    assert old.status_code == 308
    assert old["Location"] == f"{changelist}?status__exact=done"
    assert staff_client.get(old["Location"]).status_code == 200
    playground = staff_client.get("/admin/retrieval/evaluationrun/playground/")
    assert playground["Location"] == reverse("admin:quality_evaluationrun_playground")
    posted = staff_client.post("/admin/retrieval/evalcase/", {"action": "activate"})
    assert posted.status_code == 308
    assert posted["Location"] == reverse("admin:quality_evalcase_changelist")
    # Other knowledge-base pages keep their addresses.
    assert staff_client.get("/admin/retrieval/document/").status_code == 200


@pytest.mark.parametrize(
    "content",
    [b"[" * 5000 + b"]" * 5000, b'{"question": "q\\u0000", "relevant": ["pt/x"]}\n'],
    ids=["nested", "nul"],
)
def test_a_hostile_tasks_file_is_refused_with_its_reason(
    staff_client: Client, small_kb: Any, content: bytes
) -> None:
    """The attack: each was an HTTP 500 (RecursionError in json; PostgreSQL refusing NUL)."""
    response = staff_client.post(
        reverse("admin:quality_evaluationrun_add"),
        {
            "source": "file",
            "tasks_file": SimpleUploadedFile("tasks.jsonl", content),
            "collection": small_kb.pk,
            "modes": ["none"],
            "ks": "5",
        },
    )
    assert response.status_code == 200
    assert response.context["form"].errors["tasks_file"]
    assert not EvaluationRun.objects.exists()
