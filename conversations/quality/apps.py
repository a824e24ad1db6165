from __future__ import annotations

from django.apps import AppConfig


class QualityConfig(AppConfig):
    """Its own app (label `quality`) inside conversations: it reads conversations and drives
    retrieval, and neither of them depends on it."""

    name = "conversations.quality"
    label = "quality"
    verbose_name = "Quality"
    default_auto_field = "django.db.models.BigAutoField"
