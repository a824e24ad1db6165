"""Close chat sockets as soon as the session behind them ends (wiring only: see consumers).

- Sign-out: that session's sockets close.
- A user saved (deactivated, password changed) or deleted: all their sockets re-check their
  session, and those whose session no longer authenticates close. A save that only records
  a login is skipped.
Each runs once the transaction commits, so the sockets read what was written.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import HttpRequest

from conversations.consumers import session_sockets_close, sockets_recheck

User = get_user_model()


@receiver(user_logged_out, dispatch_uid="chat-sockets-sign-out")
def _signed_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    if user is not None and key:
        transaction.on_commit(partial(session_sockets_close, user_id=user.pk, session_key=key))


@receiver(post_save, sender=User, dispatch_uid="chat-sockets-user-saved")
def _user_saved(
    sender: Any, instance: Any, created: bool, update_fields: Any = None, **kwargs: Any
) -> None:
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    transaction.on_commit(partial(sockets_recheck, user_id=instance.pk))


@receiver(post_delete, sender=User, dispatch_uid="chat-sockets-user-deleted")
def _user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    transaction.on_commit(partial(sockets_recheck, user_id=instance.pk))
