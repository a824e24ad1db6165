"""The evaluation pages' old addresses, from when their models were the knowledge base's.

The admin builds a model's addresses from its app's label: `/admin/retrieval/evalcase/...`
and `/admin/retrieval/evaluationrun/...` became `/admin/quality/...` when the models moved
here. The old ones (bookmarks, links in notes) answer with a permanent redirect to the same
page, query string included; 308, so that a form posted to an old address is posted again,
not turned into a GET. Mounted before the admin (`chatrag.urls`).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.urls import URLPattern, re_path, reverse

MOVED = ("evalcase", "evaluationrun")


def moved_admin_page(request: HttpRequest, model: str, rest: str) -> HttpResponsePermanentRedirect:
    """The same admin page at its `quality` address."""
    query = request.META.get("QUERY_STRING", "")
    target = f"{reverse('admin:app_list', args=['quality'])}{model}/{rest}"
    return HttpResponsePermanentRedirect(
        f"{target}?{query}" if query else target, preserve_request=True
    )


urlpatterns: list[URLPattern] = [
    re_path(
        rf"^admin/retrieval/(?P<model>{'|'.join(MOVED)})/(?P<rest>.*)$",
        moved_admin_page,
        name="quality_moved_admin_page",
    ),
]
