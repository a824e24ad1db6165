"""Documents in the admin: upload (a Celery ingestion job with a progress bar), re-index,
delete, per-document groups; collections and the jobs' pages."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from retrieval.access import documents_readable
from retrieval.admin.base import (
    ListFilterLookupsOnly,
    NoAddOrChangeMixin,
    ObjectContextAdmin,
    admin_page,
    request_user,
)
from retrieval.admin.forms import DocumentUploadForm
from retrieval.admin.progress import ProgressMixin
from retrieval.documents import documents_delete, documents_reindex, documents_upload
from retrieval.ingestion.services import document_set_groups
from retrieval.models import Chunk, Collection, Document, IngestionJob


@admin.register(Collection)
class CollectionAdmin(admin.ModelAdmin[Collection]):
    list_display = ["slug", "name", "is_evaluation", "embedding_model", "created_at"]
    readonly_fields = ["embedding_model", "embedding_dim", "source_checksum"]


class ChunkInline(admin.TabularInline[Chunk, Document]):
    model = Chunk
    fields = ("position", "heading", "text")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin[Document]):
    """Documents come from ingestion: "add" uploads files; groups and versions are edited here."""

    list_display = [
        "title",
        "external_id",
        "collection",
        "area",
        "language",
        "group_names",
        "chunk_count",
        "version",
        "superseded",
        "updated_at",
    ]
    list_filter = ["collection", "area", "language", "groups", "superseded"]
    search_fields = ["title", "external_id"]
    fields = [
        "title",
        "external_id",
        "collection",
        "area",
        "language",
        "groups",
        "effective_date",
        "superseded",
        "superseded_by",
        "source_path",
        "checksum",
        "version",
        "embedding_model",
        "created_at",
        "updated_at",
    ]
    # Changing the text, language or area means re-ingesting the file; groups and versions
    # change in place (search reads a page's version at query time: nothing re-embedded).
    readonly_fields = (
        "title",
        "external_id",
        "collection",
        "area",
        "language",
        "source_path",
        "checksum",
        "version",
        "embedding_model",
        "created_at",
        "updated_at",
    )
    filter_horizontal = ["groups"]
    inlines = [ChunkInline]
    actions = ["reindex"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        # Staff see (list, search, open, re-index, delete) only the documents they may read.
        return (
            documents_readable(user=request.user, documents=super().get_queryset(request))
            .select_related("collection")
            .prefetch_related("groups")
            .annotate(n_chunks=Count("chunks"))
        )

    @admin.display(description=gettext_lazy("groups"))
    def group_names(self, obj: Document) -> str:
        names = sorted(g.name for g in obj.groups.all())
        return ", ".join(names) if names else _("everyone")

    @admin.display(description=gettext_lazy("passages"), ordering="n_chunks")
    def chunk_count(self, obj: Document) -> int:
        return int(getattr(obj, "n_chunks", 0))

    def save_related(
        self, request: HttpRequest, form: ModelForm[Document], formsets: Any, change: bool
    ) -> None:
        # Group changes must reach the chunks' access columns used by search.
        super().save_related(request, form, formsets, change)
        document = form.instance
        document_set_groups(
            document=document, group_names=list(document.groups.values_list("name", flat=True))
        )

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        documents_delete(documents=[obj])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        documents_delete(documents=queryset.select_related("collection"))

    @admin.action(description=gettext_lazy("Re-index selected documents"), permissions=["change"])
    def reindex(self, request: HttpRequest, queryset: QuerySet[Document]) -> HttpResponse | None:
        jobs = documents_reindex(
            documents=queryset.select_related("collection"), user=request_user(request)
        )
        if len(jobs) == 1:
            return HttpResponseRedirect(
                reverse("admin:retrieval_ingestionjob_change", args=[jobs[0].pk])
            )
        self.message_user(request, _("%(count)d re-index jobs queued.") % {"count": len(jobs)})
        return None

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Upload files; they are ingested by the worker and the job's page shows progress."""
        if not self.has_add_permission(request):
            return super().add_view(request, form_url, extra_context)  # the usual 403
        if request.method == "POST":
            form = DocumentUploadForm(request.POST, request.FILES)
            if form.is_valid():
                job = documents_upload(
                    collection=form.cleaned_data["collection"],
                    files=form.cleaned_data["uploads"],
                    folder=form.cleaned_data["folder"],
                    groups=[g.name for g in form.cleaned_data["groups"]],
                    user=request_user(request),
                )
                messages.success(request, _("Upload received; ingestion is running."))
                return HttpResponseRedirect(
                    reverse("admin:retrieval_ingestionjob_change", args=[job.pk])
                )
        else:
            form = DocumentUploadForm()
        context = {"title": _("Upload documents"), "form": form, "media": self.media + form.media}
        return admin_page(
            self, request, "admin/retrieval/document/upload.html", context, extra_context
        )


@admin.register(IngestionJob)
class IngestionJobAdmin(
    ListFilterLookupsOnly, ProgressMixin, NoAddOrChangeMixin, ObjectContextAdmin[IngestionJob]
):
    """A job's page shows its progress; jobs are started by uploads and re-index actions."""

    list_display = ["id", "collection", "kind", "status", "progress", "created_by", "created_at"]
    list_filter = ["status", "collection"]
    fields = ("collection", "status", "created_by", "created_at", "finished_at", "paths", "groups")
    readonly_fields = fields
    change_form_template = "admin/retrieval/ingestionjob/progress.html"

    @admin.display(description=gettext_lazy("kind"))
    def kind(self, obj: IngestionJob) -> str:
        return _("re-index") if obj.document_ids else _("ingest")

    @admin.display(description=gettext_lazy("progress"))
    def progress(self, obj: IngestionJob) -> str:
        return format_html("{} / {}", obj.done, obj.total)

    def get_urls(self) -> list[URLPattern]:
        return [*self.progress_urls(), *super().get_urls()]

    def change_context(self, request: HttpRequest, job: IngestionJob) -> dict[str, Any]:
        return {
            "job": job,
            "progress_url": reverse("admin:retrieval_ingestionjob_progress", args=[job.pk]),
            "running": job.status in {IngestionJob.Status.QUEUED, IngestionJob.Status.RUNNING},
            "report": job.report or {},
            "documents": (
                documents_readable(user=request.user).filter(
                    collection=job.collection, pk__in=job.document_ids
                )
                if job.document_ids
                else None
            ),
        }
