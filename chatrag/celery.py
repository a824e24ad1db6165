"""Celery application; configuration comes from Django settings (CELERY_* names)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

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


@worker_process_init.connect
def _pool_child_may_fork(**kwargs: Any) -> None:
    """Let a prefork pool's child start processes of its own.

    Ingestion reads each uploaded file in a forked child (`parse_files_isolated`, bounded in
    time and memory); Celery marks its pool's children daemonic, and a daemonic process may
    not start children, so every admin upload failed under `celery worker` with the default
    pool ("daemonic processes are not allowed to have children"; tests/deploy). The parse
    child is killed and joined by its parent, so it never outlives the task.
    """
    multiprocessing.current_process().daemon = False
