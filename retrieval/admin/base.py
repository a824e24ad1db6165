"""What the apps' admin classes share: records staff may not edit, lists filtered only
through their filters, extra pages, object context."""

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


# Lookups a list filter may generate. Pattern and range lookups on text (`title__regex=`,
# `reason__startswith=`, `title__gt=`, `report__icontains=` on a JSON report) would let staff
# read raw text one character a time.
_FILTER_LOOKUPS = {"exact", "iexact", "in", "isnull", "gte", "gt", "lte", "lt", "id", "pk"}


class ListFilterLookupsOnly:
    """A list filtered only through its own list filters (and date hierarchy).

    Django allows any lookup on a model's own fields in the URL, JSON keys and `icontains`
    included: `?report__icontains=pt/faixas` on the evaluation runs told staff outside a
    group which restricted documents a report ranked, though its page shows placeholders.
    """

    # `request` optional as in Django 5.2's own signature (django-stubs 5.2 checks it).
    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # A filter class's own parameter ("review", "reason") is read by the class, not the ORM.
        admin_: Any = self  # a ModelAdmin: list_filter and date_hierarchy are its own
        if lookup in {getattr(f, "parameter_name", None) for f in admin_.list_filter}:
            return True
        fields = {
            f if isinstance(f, str) else f[0] for f in admin_.list_filter if not isinstance(f, type)
        }
        if admin_.date_hierarchy:
            fields.add(admin_.date_hierarchy)
        parts = lookup.split("__")
        for field in fields:
            prefix = field.split("__")
            if parts[: len(prefix)] == prefix and set(parts[len(prefix) :]) <= _FILTER_LOOKUPS:
                return True
        return False


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
