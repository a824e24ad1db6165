"""Admin for the knowledge base: documents (read-mostly), glossary, collections, jobs."""

from __future__ import annotations

from django.contrib import admin

from retrieval.models import Chunk, Collection, Document, GlossaryEntry, IngestionJob


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
    list_display = [
        "title",
        "external_id",
        "collection",
        "area",
        "language",
        "version",
        "updated_at",
    ]
    list_filter = ["collection", "area", "language", "groups"]
    search_fields = ["title", "external_id"]
    readonly_fields = ["checksum", "version", "embedding_model", "created_at", "updated_at"]
    filter_horizontal = ["groups"]
    inlines = [ChunkInline]

    def save_related(self, request, form, formsets, change):
        # Group changes must reach the chunks' access columns used by search.
        super().save_related(request, form, formsets, change)
        from retrieval.ingestion.services import document_set_groups

        document = form.instance
        document_set_groups(
            document=document, group_names=list(document.groups.values_list("name", flat=True))
        )


@admin.register(GlossaryEntry)
class GlossaryEntryAdmin(admin.ModelAdmin[GlossaryEntry]):
    list_display = ["term", "expansion", "area", "active", "collection", "updated_at"]
    list_editable = ["expansion", "area", "active"]
    list_filter = ["collection", "active", "area"]
    search_fields = ["term", "expansion"]


@admin.register(IngestionJob)
class IngestionJobAdmin(admin.ModelAdmin[IngestionJob]):
    list_display = ["id", "collection", "status", "done", "total", "created_at", "finished_at"]
    readonly_fields = [f.name for f in IngestionJob._meta.fields]
