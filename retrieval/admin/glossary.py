"""The glossary in the admin: CRUD, JSON import and export, and the panel's "add" flow."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from retrieval.admin.base import admin_page
from retrieval.admin.forms import GlossaryImportForm
from retrieval.glossary_io import glossary_export, glossary_import
from retrieval.models import Collection, GlossaryEntry
from retrieval.services import default_collection


def _json_download(data: object, name: str) -> HttpResponse:
    response = HttpResponse(
        json.dumps(data, ensure_ascii=False, indent=2) + "\n",
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@admin.register(GlossaryEntry)
class GlossaryEntryAdmin(admin.ModelAdmin[GlossaryEntry]):
    list_display = ["term", "expansion", "language", "area", "active", "collection", "updated_at"]
    list_editable = ["expansion", "area", "active"]
    list_filter = ["collection", "active", "language", "area"]
    search_fields = ["term", "expansion"]
    actions = ["export_selected", "activate", "deactivate"]
    change_list_template = "admin/retrieval/glossaryentry/change_list.html"

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        # The "needs attention" panel links here with ?term=...&collection=...&from_trace=...
        initial = super().get_changeform_initial_data(request)
        initial.setdefault("collection", str(default_collection().pk))
        return initial

    def response_add(
        self, request: HttpRequest, obj: GlossaryEntry, post_url_continue: str | None = None
    ) -> HttpResponse:
        trace = request.GET.get("from_trace", "")
        if (
            trace.isdigit()
            and "_addanother" not in request.POST
            and "_continue" not in request.POST
        ):
            # Back to the turn that needed the entry, showing what it retrieves now.
            messages.success(
                request,
                _("“%(term)s” added to the glossary. This is what the turn retrieves now:")
                % {"term": obj.term},
            )
            return HttpResponseRedirect(
                reverse("admin:conversations_turntrace_retry", args=[int(trace)])
            )
        return super().response_add(request, obj, post_url_continue)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("import/", wrap(self.import_view), name="retrieval_glossaryentry_import"),
            path("export/", wrap(self.export_view), name="retrieval_glossaryentry_export"),
            *super().get_urls(),
        ]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        if not (self.has_add_permission(request) and self.has_change_permission(request)):
            raise PermissionDenied
        if request.method == "POST":
            form = GlossaryImportForm(request.POST, request.FILES)
            if form.is_valid():
                collection: Collection = form.cleaned_data["collection"]
                count = glossary_import(
                    collection=collection,
                    data=form.cleaned_data["file"],
                    replace=form.cleaned_data["replace"],
                )
                messages.success(
                    request,
                    _("%(count)d glossary entries imported into %(collection)s.")
                    % {"count": count, "collection": collection},
                )
                return HttpResponseRedirect(reverse("admin:retrieval_glossaryentry_changelist"))
        else:
            form = GlossaryImportForm()
        context = {"title": _("Import a glossary"), "form": form}
        return admin_page(self, request, "admin/retrieval/glossaryentry/import.html", context)

    def export_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        collection_id = request.GET.get("collection", "")
        collection = (
            Collection.objects.filter(pk=int(collection_id)).first()
            if collection_id.isdigit()
            else default_collection()
        )
        if collection is None:
            return HttpResponse(status=404)
        name = f"glossary-{collection.slug}-{timezone.localdate():%Y%m%d}.json"
        return _json_download(glossary_export(collection=collection), name)

    @admin.action(description=gettext_lazy("Export selected entries as JSON"))
    def export_selected(
        self, request: HttpRequest, queryset: QuerySet[GlossaryEntry]
    ) -> HttpResponse:
        data = [
            {"term": e.term, "expansion": e.expansion, "area": e.area or None, "active": e.active}
            for e in queryset.order_by("term")
        ]
        return _json_download(data, f"glossary-{timezone.localdate():%Y%m%d}.json")

    @admin.action(description=gettext_lazy("Activate selected entries"), permissions=["change"])
    def activate(self, request: HttpRequest, queryset: QuerySet[GlossaryEntry]) -> None:
        count = queryset.update(active=True, updated_at=timezone.now())
        self.message_user(request, _("%(count)d entries activated.") % {"count": count})

    @admin.action(description=gettext_lazy("Deactivate selected entries"), permissions=["change"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet[GlossaryEntry]) -> None:
        count = queryset.update(active=False, updated_at=timezone.now())
        self.message_user(request, _("%(count)d entries deactivated.") % {"count": count})
