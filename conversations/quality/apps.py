from __future__ import annotations

from django.apps import AppConfig


class QualityConfig(AppConfig):
    """Its own app (label `quality`) inside conversations: it reads conversations and drives
    retrieval, and neither of them depends on it."""

    name = "conversations.quality"
    label = "quality"
    verbose_name = "Quality"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A sample of the turns' rewrites is queued for review as their traces are written:
        # conversations sends the signal and may not import this app.
        from conversations.quality.fidelity import fidelity_on_turn_traced
        from conversations.services import turn_traced

        turn_traced.connect(fidelity_on_turn_traced, dispatch_uid="quality-fidelity-sample")
