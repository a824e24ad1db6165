"""The start-up sweep: turns a stopped server left "in progress" are failed, nothing else."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from conversations.models import Message
from conversations.services import INTERRUPTED_ERROR, conversation_create, message_store_user

pytestmark = pytest.mark.django_db


def _turn(user: Any, answer_status: str | None, text: str = "") -> tuple[Message, Message | None]:
    conversation = conversation_create(user=user)
    question = message_store_user(conversation=conversation, text="quantos dias de férias?")
    if answer_status is None:
        return question, None
    Message.objects.filter(pk=question.pk).update(status=Message.Status.COMPLETE)
    answer = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        reply_to=question,
        status=answer_status,
        text=text,
    )
    return question, answer


def _age(message: Message, seconds: float) -> None:
    Message.objects.filter(pk=message.pk).update(
        updated_at=timezone.now() - timedelta(seconds=seconds)
    )


def _status(message: Message) -> tuple[str, str]:
    message.refresh_from_db()
    return message.status, message.error


def test_all_marks_every_unfinished_turn_and_keeps_the_partial_text(
    personas: dict[str, Any],
) -> None:
    ana = personas["ana"]
    waiting, _ = _turn(ana, None)  # the server died before answering
    _, streaming = _turn(ana, Message.Status.STREAMING, "Você tem direito a 30 dias")
    _, complete = _turn(ana, Message.Status.COMPLETE, "Trinta dias [1].")
    _, stopped = _turn(ana, Message.Status.STOPPED, "Trin")
    assert streaming is not None and complete is not None and stopped is not None
    out = StringIO()
    call_command("recover_interrupted", "--all", stdout=out)
    assert out.getvalue().strip() == "2 interrupted message(s) marked failed"
    assert _status(waiting) == ("error", INTERRUPTED_ERROR)
    assert _status(streaming) == ("error", INTERRUPTED_ERROR)
    assert streaming.text == "Você tem direito a 30 dias"  # what the user had seen stays
    assert _status(complete) == ("complete", "")
    assert _status(stopped) == ("stopped", "")

    # The page shows the turn as failed (asking to try again), no longer "being written".
    client = Client()
    client.force_login(ana)
    page = client.get(f"/c/{streaming.conversation_id}/").content.decode()
    assert 'data-state="error"' in page and 'data-state="streaming"' not in page


def test_default_leaves_turns_another_server_may_still_be_writing(
    personas: dict[str, Any], settings: Any
) -> None:
    settings.CHATRAG_LLM_TIMEOUT = 20
    settings.CHATRAG_REWRITE_TIMEOUT = 8
    _, live = _turn(personas["ana"], Message.Status.STREAMING, "Você tem")
    _, dead = _turn(personas["ana"], Message.Status.STREAMING, "Você tem direito")
    assert live is not None and dead is not None
    _age(live, 60)  # quiet for a minute: within a model stall and a rewrite, plus margin
    _age(dead, 20 + 8 + 61)
    call_command("recover_interrupted", stdout=StringIO())
    assert _status(live) == ("streaming", "")
    assert _status(dead) == ("error", INTERRUPTED_ERROR)


def test_beats_periodic_sweep_fails_only_turns_idle_past_the_setting(
    personas: dict[str, Any], settings: Any
) -> None:
    """The Celery beat task (docker-compose's beat): the same sweep, on a schedule."""
    from conversations.tasks import recover_interrupted

    assert settings.CELERY_BEAT_SCHEDULE["recover-interrupted-turns"]["task"] == (
        recover_interrupted.name
    )
    settings.CHATRAG_INTERRUPTED_AFTER_SECONDS = 30
    _, live = _turn(personas["ana"], Message.Status.STREAMING, "Você tem")
    _, dead = _turn(personas["ana"], Message.Status.STREAMING, "Você tem direito")
    assert live is not None and dead is not None
    _age(live, 10)
    _age(dead, 31)
    assert recover_interrupted() == 1
    assert _status(live) == ("streaming", "")
    assert _status(dead) == ("error", INTERRUPTED_ERROR)
