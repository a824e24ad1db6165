"""Celery tasks of the conversations app: thin wrappers over one service each."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

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
    """Delete the Postgres channel layer's expired messages (run by Celery beat).

    Imported here: the layer's module loads channels_postgres' models, which are not an
    installed app in the Redis set-up (a worker importing it at start-up died there).
    """
    from chatrag.layers import expired_messages_delete

    return expired_messages_delete()
