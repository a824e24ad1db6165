"""Documents and glossary in the admin: upload with a progress endpoint (the Celery ingestion
task, run eagerly), groups, re-index, delete; glossary import and export."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from retrieval.models import Chunk, Document, GlossaryEntry, IngestionJob, VocabularyTerm
from retrieval.services import default_collection

pytestmark = pytest.mark.django_db

POLICY = "# Auxílio creche\n\nO auxílio creche é de R$ 600 por mês até os seis anos.\n"


@pytest.fixture(autouse=True)
def _uploads_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def staff_client(client: Client, db: None) -> Client:
    client.force_login(User.objects.create_superuser("boss", password="pw-boss-123"))
    return client


def _upload(client: Client, capture: Any, **extra: Any) -> IngestionJob:
    files = [
        SimpleUploadedFile("auxilio-creche.md", POLICY.encode()),
        SimpleUploadedFile("notas.txt", b"Plano odontologico: carencia de 30 dias."),
    ]
    data = {"collection": default_collection().pk, "uploads": files, "folder": "pt", **extra}
    with capture(execute=True):
        response = client.post(reverse("admin:retrieval_document_add"), data)
    assert response.status_code == 302, response.context and response.context["form"].errors
    job = IngestionJob.objects.get()
    assert response["Location"] == reverse("admin:retrieval_ingestionjob_change", args=[job.pk])
    return job


def _change_form_data(client: Client, url: str, **fields: Any) -> dict[str, Any]:
    """What the browser posts back from a change form (the inlines' management forms too)."""
    page = client.get(url)
    data: dict[str, Any] = dict(fields)
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        for form in [formset.management_form, *formset.forms]:
            for name in form.fields:
                value = form[name].value()
                if value is not None:
                    data[form.add_prefix(name)] = value
    return data


def test_upload_ingests_through_the_task_with_progress(
    staff_client: Client, django_capture_on_commit_callbacks: Any, eager_celery: None
) -> None:
    restricted = Group.objects.create(name="rh-restrito")
    job = _upload(staff_client, django_capture_on_commit_callbacks, groups=[restricted.pk])
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.DONE, job.report
    assert job.report["added"] == 2 and job.groups == ["rh-restrito"]
    progress = staff_client.get(reverse("admin:retrieval_ingestionjob_progress", args=[job.pk]))
    assert progress.json() == {
        "status": "done",
        "done": 2,
        "total": 2,
        "percent": 100,
        "finished": True,
    }
    assert "no-store" in progress["Cache-Control"]
    document = Document.objects.get(external_id="pt/auxilio-creche")
    assert list(document.groups.values_list("name", flat=True)) == ["rh-restrito"]
    assert set(document.chunks.values_list("is_public", flat=True)) == {False}
    assert Path(document.source_path).is_file()
    page = staff_client.get(reverse("admin:retrieval_ingestionjob_change", args=[job.pk]))
    assert page.status_code == 200 and "passages embedded" in page.content.decode()


def test_job_page_polls_while_running(staff_client: Client) -> None:
    job = IngestionJob.objects.create(collection=default_collection(), paths=[], total=4, done=1)
    html = staff_client.get(
        reverse("admin:retrieval_ingestionjob_change", args=[job.pk])
    ).content.decode()
    progress_url = reverse("admin:retrieval_ingestionjob_progress", args=[job.pk])
    assert f'data-progress-url="{progress_url}"' in html
    assert "review/progress.js" in html and '<progress max="4" value="1">' in html
    state = staff_client.get(progress_url).json()
    assert state == {"status": "queued", "done": 1, "total": 4, "percent": 25, "finished": False}


def test_upload_rejects_unsupported_files(
    staff_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    data = {
        "collection": default_collection().pk,
        "uploads": [SimpleUploadedFile("virus.exe", b"MZ")],
        "folder": "../etc",
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(reverse("admin:retrieval_document_add"), data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "uploads" in errors and "folder" in errors
    assert not IngestionJob.objects.exists()


def test_groups_reindex_and_delete(
    staff_client: Client, django_capture_on_commit_callbacks: Any, eager_celery: None
) -> None:
    _upload(staff_client, django_capture_on_commit_callbacks)
    document = Document.objects.get(external_id="pt/auxilio-creche")
    assert set(document.chunks.values_list("is_public", flat=True)) == {True}
    changelist = reverse("admin:retrieval_document_changelist")

    # Per-document groups: the chunks' access columns follow.
    hr = Group.objects.create(name="rh-restrito")
    url = reverse("admin:retrieval_document_change", args=[document.pk])
    response = staff_client.post(url, _change_form_data(staff_client, url, groups=[hr.pk]))
    assert response.status_code == 302
    assert list(document.chunks.values_list("group_ids", flat=True)) == [[hr.pk]]

    # Re-index: read again from its file, re-embedded, same id, groups kept.
    version = document.version
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(
            changelist, {"action": "reindex", "_selected_action": [document.pk]}
        )
    job = IngestionJob.objects.exclude(document_ids=[]).get()
    assert response["Location"] == reverse("admin:retrieval_ingestionjob_change", args=[job.pk])
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.DONE and job.report["updated"] == 1, job.report
    document.refresh_from_db()
    assert document.version == version + 1 and document.external_id == "pt/auxilio-creche"
    assert list(document.groups.all()) == [hr]

    # Delete: passages, vocabulary and the uploaded file go too.
    source = Path(document.source_path)
    assert VocabularyTerm.objects.filter(word="creche").exists()
    response = staff_client.post(
        changelist,
        {"action": "delete_selected", "_selected_action": [document.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not Document.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert not VocabularyTerm.objects.filter(word="creche").exists()
    assert not source.exists()


def test_glossary_import_and_export(staff_client: Client) -> None:
    collection = default_collection()
    GlossaryEntry.objects.create(collection=collection, term="VT", expansion="vale-transporte")
    data = [
        {"term": "TRI", "expansion": "trabalho remoto integral", "area": "rh"},
        {"term": "PLR", "expansion": "participação nos lucros"},
    ]
    upload = SimpleUploadedFile("glossary.json", json.dumps(data).encode())
    response = staff_client.post(
        reverse("admin:retrieval_glossaryentry_import"),
        {"collection": collection.pk, "file": upload, "replace": "on"},
    )
    assert response.status_code == 302
    assert sorted(GlossaryEntry.objects.values_list("term", flat=True)) == ["PLR", "TRI"]

    exported = staff_client.get(reverse("admin:retrieval_glossaryentry_export"))
    assert exported["Content-Disposition"].startswith("attachment;")
    assert json.loads(exported.content) == [
        {
            "term": "PLR",
            "expansion": "participação nos lucros",
            "area": None,
            "language": None,
            "active": True,
        },
        {
            "term": "TRI",
            "expansion": "trabalho remoto integral",
            "area": "rh",
            "language": None,
            "active": True,
        },
    ]
    bad = SimpleUploadedFile("glossary.json", b'[{"term": ""}]')
    response = staff_client.post(
        reverse("admin:retrieval_glossaryentry_import"), {"collection": collection.pk, "file": bad}
    )
    assert response.status_code == 200 and response.context["form"].errors["file"]


def test_glossary_crud_and_actions(staff_client: Client) -> None:
    collection = default_collection()
    add = staff_client.post(
        reverse("admin:retrieval_glossaryentry_add"),
        {
            "collection": collection.pk,
            "term": "VA",
            "expansion": "vale-alimentação",
            "active": "on",
        },
    )
    assert add.status_code == 302
    entry = GlossaryEntry.objects.get(term="VA")
    changelist = reverse("admin:retrieval_glossaryentry_changelist")
    staff_client.post(changelist, {"action": "deactivate", "_selected_action": [entry.pk]})
    entry.refresh_from_db()
    assert not entry.active
    exported = staff_client.post(
        changelist, {"action": "export_selected", "_selected_action": [entry.pk]}
    )
    assert json.loads(exported.content)[0]["term"] == "VA"


def test_restarting_make_run_keeps_documents_uploaded_through_the_admin(
    staff_client: Client,
    django_capture_on_commit_callbacks: Any,
    eager_celery: None,
    settings: Any,
    tmp_path: Path,
) -> None:
    """Issue 14, finding 8: `make run` re-ingests the demo folder with --prune on every start;
    that pruned the whole collection, so every upload was deleted at the next restart."""
    from django.core.management import call_command

    kb = tmp_path / "kb"
    (kb / "pt").mkdir(parents=True)
    demo = kb / "pt" / "ferias.md"
    demo.write_text("# Férias\n\nTrinta dias corridos por ano.\n", encoding="utf-8")
    settings.CHATRAG_DEMO_KB = kb
    call_command("seed_demo", stdout=io.StringIO())  # the first start
    job = _upload(staff_client, django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.status == IngestionJob.Status.DONE, job.report
    uploaded = {"pt/auxilio-creche", "pt/notas"}

    call_command("seed_demo", stdout=io.StringIO())  # a restart
    assert set(Document.objects.values_list("external_id", flat=True)) == {"pt/ferias", *uploaded}

    # --prune still drops a demo file that was deleted, and only that.
    demo.unlink()
    (kb / "pt" / "vr.md").write_text("# VR\n\nR$ 48 por dia.\n", encoding="utf-8")
    call_command("seed_demo", stdout=io.StringIO())
    assert set(Document.objects.values_list("external_id", flat=True)) == {"pt/vr", *uploaded}


def test_restarting_make_run_keeps_the_admins_glossary_edits(settings: Any, tmp_path: Path) -> None:
    """A second attack on #14: an admin's edit of a demo glossary term ('VR') was undone at
    the next `make run`, which loaded demo/glossary.json over it; a term the admin switched
    off came back on. New demo terms still arrive."""
    from django.core.management import call_command

    kb = tmp_path / "kb"
    (kb / "pt").mkdir(parents=True)
    (kb / "pt" / "vr.md").write_text("# VR\n\nR$ 48 por dia.\n", encoding="utf-8")
    glossary = tmp_path / "glossary.json"
    glossary.write_text(
        json.dumps(
            [
                {"term": "VR", "expansion": "vale-refeição"},
                {"term": "VA", "expansion": "vale-alimentação"},
            ]
        ),
        encoding="utf-8",
    )
    settings.CHATRAG_DEMO_KB = kb
    call_command("seed_demo", stdout=io.StringIO())  # the first start
    GlossaryEntry.objects.filter(term="VR").update(expansion="vale-refeição (Nutri+)")
    GlossaryEntry.objects.filter(term="VA").update(active=False)

    data = json.loads(glossary.read_text(encoding="utf-8"))
    glossary.write_text(
        json.dumps([*data, {"term": "PLR", "expansion": "participação"}]), encoding="utf-8"
    )
    call_command("seed_demo", stdout=io.StringIO())  # a restart
    entries = {e.term: e for e in GlossaryEntry.objects.all()}
    assert entries["VR"].expansion == "vale-refeição (Nutri+)"
    assert not entries["VA"].active
    assert entries["PLR"].expansion == "participação"


@pytest.mark.parametrize("part_files", [32, 1], ids=["one-job", "split-job"])
def test_an_upload_never_replaces_a_document_its_uploader_may_not_read(
    staff_client: Client,
    django_capture_on_commit_callbacks: Any,
    eager_celery: None,
    settings: Any,
    part_files: int,
) -> None:
    """The second attack (issue 14): Carla, staff with the right to add documents but not in
    `rh-restrito`, uploaded `faixas-salariais-2026.md` into folder `pt`. Its id,
    `pt/faixas-salariais-2026`, was the restricted salary table's, so the job replaced it:
    the table's text was gone, the page was public with her text, and "updated: 1" told her
    the id existed. A document she may read is still replaced, as the form says. The same
    in a job split into parts (more files than CHATRAG_INGEST_PART_FILES)."""
    from django.contrib.auth.models import Permission

    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.chunking import Section
    from retrieval.ingestion.services import SourceDocument, documents_ingest

    settings.CHATRAG_INGEST_PART_FILES = part_files
    collection = default_collection()
    table = "Analista III: R$ 9.800 a R$ 13.200."
    documents_ingest(
        collection=collection,
        sources=[
            SourceDocument(
                "pt/faixas-salariais-2026",
                "Faixas salariais 2026",
                (Section("Analista", table),),
                groups=("rh-restrito",),
            ),
            SourceDocument("pt/auxilio-creche", "Auxílio creche", (Section("", "R$ 500."),)),
        ],
        embedder=get_embedder(),
    )
    carla = User.objects.create_user("carla", password="pw-carla-123", is_staff=True)
    carla.user_permissions.set(
        Permission.objects.filter(
            codename__in=["add_document", "view_document", "view_ingestionjob"]
        )
    )
    client = Client()
    client.force_login(carla)
    forged = "---\ntitle: Tabela nova\n---\n# Tabela\n\nTexto da Carla.\n"
    files = [
        SimpleUploadedFile("faixas-salariais-2026.md", forged.encode()),
        SimpleUploadedFile("auxilio-creche.md", POLICY.encode()),
    ]
    data = {"collection": collection.pk, "uploads": files, "folder": "pt"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:retrieval_document_add"), data)
    assert response.status_code == 302
    job = IngestionJob.objects.get()
    assert job.status == IngestionJob.Status.DONE, job.report
    salary = Document.objects.get(external_id="pt/faixas-salariais-2026")
    assert salary.title == "Faixas salariais 2026"
    assert list(salary.groups.values_list("name", flat=True)) == ["rh-restrito"]
    assert list(salary.chunks.values_list("text", "is_public")) == [(table, False)]
    assert job.report["updated"] == 1  # the creche page, which Carla may read
    assert "R$ 600" in Document.objects.get(external_id="pt/auxilio-creche").chunks.get().text
    [refused] = job.report["errors"]
    assert refused["document"] == "pt/faixas-salariais-2026"
    assert "may not read" in refused["error"]

    # A superuser reads everything: the same upload replaces the table.
    with django_capture_on_commit_callbacks(execute=True):
        staff_client.post(
            reverse("admin:retrieval_document_add"),
            {
                "collection": collection.pk,
                "uploads": [SimpleUploadedFile("faixas-salariais-2026.md", forged.encode())],
                "folder": "pt",
            },
        )
    assert Document.objects.get(external_id="pt/faixas-salariais-2026").title == "Tabela nova"


@pytest.mark.parametrize(
    "content",
    [b"[" * 5000 + b"]" * 5000, b'{"VR\\u0000": "vale-refei\\u00e7\\u00e3o"}'],
    ids=["nested", "nul"],
)
def test_a_hostile_glossary_file_is_refused_with_its_reason(
    staff_client: Client, content: bytes
) -> None:
    """The attack: each was an HTTP 500 (RecursionError in json; PostgreSQL refusing NUL)."""
    response = staff_client.post(
        reverse("admin:retrieval_glossaryentry_import"),
        {"collection": default_collection().pk, "file": SimpleUploadedFile("g.json", content)},
    )
    assert response.status_code == 200 and response.context["form"].errors["file"]
    assert not GlossaryEntry.objects.filter(term__startswith="VR").exists()
