from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    # The evaluation pages' addresses before they moved to the quality app (redirects).
    path("", include("conversations.quality.urls")),
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include("conversations.urls")),
]
