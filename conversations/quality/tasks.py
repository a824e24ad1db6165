"""Celery tasks of the quality app, as the worker finds them (`autodiscover_tasks`).

The task is declared beside the service that queues it (`conversations.quality.runs`), so
that queueing it imports nothing back; this module imports it for the worker.
"""

from __future__ import annotations

from conversations.quality.runs import evaluate_run

__all__ = ["evaluate_run"]
