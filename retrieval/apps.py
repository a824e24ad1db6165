from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks


def check_languages(**kwargs: Any) -> list[checks.CheckMessage]:
    """The language files load, and CHATRAG_DEFAULT_LANGUAGE is one of them."""
    from retrieval.pipeline.languages import LanguageDataError, language_codes

    try:
        known = language_codes()
    except LanguageDataError as exc:
        return [checks.Error(str(exc), id="retrieval.E001")]
    if settings.CHATRAG_DEFAULT_LANGUAGE not in known:
        return [
            checks.Error(
                f"CHATRAG_DEFAULT_LANGUAGE={settings.CHATRAG_DEFAULT_LANGUAGE!r} has no language "
                f"file (known: {', '.join(known)}; see CHATRAG_LANGUAGE_DIRS)",
                id="retrieval.E002",
            )
        ]
    return []


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = "Knowledge base"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_languages)
