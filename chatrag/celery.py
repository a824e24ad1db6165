"""Celery application; configuration comes from Django settings (CELERY_* names)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")

app = Celery("chatrag")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="chatrag.purge_layer_messages")
def purge_layer_messages() -> int:
    """Delete the Postgres channel layer's expired messages (run by Celery beat).

    The layer is wiring (`chatrag.layers`), so its upkeep is declared with the Celery app, not
    in an app. Imported when it runs: the layer's module loads channels_postgres' models,
    which are not an installed app in the Redis set-up (a worker importing it at start-up
    died there).
    """
    from chatrag.layers import expired_messages_delete

    return expired_messages_delete()


_BROKER_FOLDERS = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")


@app.on_after_configure.connect
def _broker_folders(sender: Celery, source: Any, **kwargs: Any) -> None:
    """Create the filesystem broker's folders (kombu creates none) once Celery is configured.

    Here rather than in settings, which create nothing: this runs in the processes that
    send or take tasks, the first time they touch Celery's configuration.
    """
    if not str(source.get("broker_url") or "").startswith("filesystem://"):
        return
    options = source.get("broker_transport_options") or {}
    for name in _BROKER_FOLDERS:
        if options.get(name):
            Path(options[name]).mkdir(parents=True, exist_ok=True)
