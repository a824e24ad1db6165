"""The staff-only JSON progress endpoint shared by ingestion jobs and evaluation runs."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from django.urls import URLPattern, path

FINISHED = {"done", "failed"}


def progress_payload(*, status: str, done: int, total: int) -> dict[str, Any]:
    percent = round(100 * done / total) if total else 0
    return {
        "status": status,
        "done": done,
        "total": total,
        "percent": min(percent, 100),
        "finished": status in FINISHED,
    }


class ProgressMixin:
    """Adds `<id>/progress/`: {status, done, total, percent, finished} for a polling bar."""

    def progress_urls(self: Any) -> list[URLPattern]:
        opts = self.model._meta
        return [
            path(
                "<path:object_id>/progress/",
                self.admin_site.admin_view(self.progress_view),
                name=f"{opts.app_label}_{opts.model_name}_progress",
            )
        ]

    def progress_view(self: Any, request: HttpRequest, object_id: str) -> JsonResponse:
        obj = self.get_object(request, object_id)
        if obj is None:
            raise Http404("not found")
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        response = JsonResponse(
            progress_payload(status=str(obj.status), done=obj.done, total=obj.total)
        )
        response["Cache-Control"] = "no-store"
        return response
