"""What the apps' admin classes share: records staff may not edit, extra pages, object context."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin
from django.contrib.auth.models import User
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

_M = TypeVar("_M", bound=Model)


def request_user(request: HttpRequest) -> User | None:
    """The signed-in user, or None: who to record as `created_by`."""
    return request.user if isinstance(request.user, User) else None


def admin_page(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    extra_context: dict[str, Any] | None = None,
) -> TemplateResponse:
    """Render one of a model admin's own pages (a form, a report) in the admin's frame."""
    return TemplateResponse(
        request,
        template,
        {
            **model_admin.admin_site.each_context(request),
            **(extra_context or {}),
            "opts": model_admin.opts,
            **context,
        },
    )


class NoAddOrChangeMixin:
    """Records the app writes itself: staff look at them (and may delete), never add or edit."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ObjectContextAdmin(admin.ModelAdmin[_M]):
    """An object's page with more context, built only when the object is there to be seen."""

    def change_context(self, request: HttpRequest, obj: _M) -> dict[str, Any]:
        """Return what the change form template needs beyond Django's own context."""
        return {}

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if obj is not None and self.has_view_permission(request, obj):
            context.update(self.change_context(request, obj))
        return super().change_view(request, object_id, form_url, context)
