"""No personal data lingers or lands in logs (issue 14, finding 6).

The attacks: `GET /?q=529.982.247-25` put the searched CPF in the web server's access log;
`channels_postgres_message` kept raw questions and answers after their expiry.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from chatrag.celery import purge_layer_messages
from conversations.models import Conversation

pytestmark = pytest.mark.django_db(databases="__all__")
CPF = "529.982.247-25"


def test_expired_layer_messages_are_deleted() -> None:
    now = datetime.now(UTC)
    with connections["channels_postgres"].cursor() as cursor:
        for expire, text in (
            (now - timedelta(minutes=5), "old"),
            (now + timedelta(minutes=5), "new"),
        ):
            cursor.execute(
                "INSERT INTO channels_postgres_message (channel, message, expire) "
                "VALUES (%s, %s, %s)",
                ["specific.gone!abc", f"meu CPF {CPF} {text}".encode(), expire],
            )
    assert purge_layer_messages() == 1
    with connections["channels_postgres"].cursor() as cursor:
        cursor.execute("SELECT message FROM channels_postgres_message")
        left = [bytes(row[0]).decode() for row in cursor.fetchall()]
    assert left == [f"meu CPF {CPF} new"]


def test_the_sidebar_search_is_posted_not_put_in_the_url(personas: dict[str, Any]) -> None:
    ana = personas["ana"]
    Conversation.objects.create(owner=ana, title=f"CPF {CPF}")
    Conversation.objects.create(owner=ana, title="férias")
    client = Client(enforce_csrf_checks=True)
    client.force_login(ana)
    page = client.get(reverse("chat")).content.decode()
    assert 'role="search" method="post"' in page and "csrfmiddlewaretoken" in page
    # A GET ?q= searches nothing (so no page of ours ever links one).
    listed = client.get(reverse("chat"), {"q": "férias"}).content.decode()
    assert f"CPF {CPF}" in listed
    token = client.cookies["csrftoken"].value
    found = client.post(reverse("chat"), {"q": "férias", "csrfmiddlewaretoken": token})
    assert found.status_code == 200
    assert f"CPF {CPF}" not in found.content.decode() and "férias" in found.content.decode()
