"""Celery tasks of the conversations app: thin wrappers over one service each."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from conversations.services import conversations_purge_expired

logger = logging.getLogger(__name__)


@shared_task(name="conversations.purge_expired")
def purge_expired() -> int:
    """Delete conversations older than CHATRAG_RETENTION_DAYS (run by Celery beat)."""
    count = conversations_purge_expired(days=settings.CHATRAG_RETENTION_DAYS)
    if count:
        logger.info("retention: deleted %d conversations", count)
    return count
