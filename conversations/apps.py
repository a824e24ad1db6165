from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _cache_table(using: str = "default", **kwargs: Any) -> None:
    """Create the database cache's table (the rate limit's, without Redis) on every migrate.

    `migrate` alone then prepares any deployment; `createcachetable` skips a table that exists.
    """
    from django.core.management import call_command

    call_command("createcachetable", database=using, verbosity=0)


class ConversationsConfig(AppConfig):
    name = "conversations"
    verbose_name = "Conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from conversations import signals  # noqa: F401 - connects the socket-closing receivers

        post_migrate.connect(_cache_table, sender=self)
