"""Celery tasks of the conversations app: thin wrappers over one service each."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from conversations.services import conversations_purge_expired, messages_recover_interrupted

logger = logging.getLogger(__name__)


@shared_task(name="conversations.purge_expired")
def purge_expired() -> int:
    """Delete conversations older than CHATRAG_RETENTION_DAYS (run by Celery beat)."""
    count = conversations_purge_expired(days=settings.CHATRAG_RETENTION_DAYS)
    if count:
        logger.info("retention: deleted %d conversations", count)
    return count


@shared_task(name="conversations.recover_interrupted")
def recover_interrupted() -> int:
    """Mark turns that no web process works on any more as failed (run by Celery beat)."""
    count = messages_recover_interrupted()
    if count:
        logger.info("recovery: marked %d interrupted message(s) failed", count)
    return count
