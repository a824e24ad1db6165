"""Celery tasks of the conversations app: thin wrappers over one service each."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from chatrag.layers import expired_messages_delete
from conversations.review.services import conversations_purge_expired

logger = logging.getLogger(__name__)


@shared_task(name="conversations.purge_expired")
def purge_expired() -> int:
    """Delete conversations older than CHATRAG_RETENTION_DAYS (run by Celery beat)."""
    count = conversations_purge_expired(days=settings.CHATRAG_RETENTION_DAYS)
    if count:
        logger.info("retention: deleted %d conversations", count)
    return count


@shared_task(name="conversations.purge_layer_messages")
def purge_layer_messages() -> int:
    """Delete the Postgres channel layer's expired messages (run by Celery beat)."""
    return expired_messages_delete()
