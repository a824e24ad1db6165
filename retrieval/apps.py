from __future__ import annotations

from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Knowledge base"
    default_auto_field = "django.db.models.BigAutoField"
