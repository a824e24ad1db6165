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
