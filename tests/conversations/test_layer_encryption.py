"""Issue 38, finding 9: what waits in the channel layer is unreadable without the secret key.

A turn's frames go through the layer (database rows with the PostgreSQL layer, Redis keys
with Redis) carrying the answer as its owner reads it, personal data included. Both layers
are configured by the settings to encrypt each message; these read the raw stored message
as anyone with access to the database or to Redis would, and then receive it as a socket
does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from channels.layers import channel_layers, get_channel_layer
from channels_postgres.db import MESSAGE_TABLE

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("CHATRAG_TEST_REDIS_URL", "")
CPF = "529.982.247-25"
FRAME = {"type": "turn.frame", "text": f"Seu CPF {CPF} está no cadastro."}


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.asyncio
async def test_the_postgres_layer_stores_a_frame_encrypted(ws_settled: None) -> None:
    channel_layers.backends = {}
    layer = get_channel_layer()
    assert layer is not None
    channel = await layer.new_channel()
    group = f"privacy-{uuid.uuid4().hex[:8]}"
    await layer.group_add(group, channel)
    await layer.group_send(group, FRAME)

    # Read as anyone with access to the database would: the layer's own table, raw.
    pool = await layer.django_db.get_db_pool(db_params=layer.db_params)
    async with pool.connection() as conn:
        cursor = await conn.execute(
            f'SELECT message FROM "{MESSAGE_TABLE}" WHERE channel = %s',  # noqa: S608
            [channel],
        )
        rows = [bytes(row[0]) for row in await cursor.fetchall()]
    assert rows, "the frame waits in the layer's table"
    assert not any(CPF.encode() in row or b"529982247" in row for row in rows)
    assert await layer.receive(channel) == FRAME
    await layer.group_discard(group, channel)


def _settings_layer(env: dict[str, str]) -> dict[str, Any]:
    """The channel layer the settings module configures for this environment."""
    code = (
        "import json, django; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.CHANNEL_LAYERS['default']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "chatrag.settings", **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.asyncio
async def test_the_redis_layer_the_settings_configure_stores_a_frame_encrypted() -> None:
    if not REDIS_URL:
        pytest.skip("set CHATRAG_TEST_REDIS_URL to a Redis server to run the Redis mode")
    import redis
    from channels_redis.core import RedisChannelLayer

    configured = _settings_layer({"REDIS_URL": REDIS_URL, "CHATRAG_DEBUG": "1"})
    assert configured["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    prefix = f"chatrag-privacy-{uuid.uuid4().hex[:8]}"
    layer = RedisChannelLayer(**{**configured["CONFIG"], "prefix": prefix})
    channel = await layer.new_channel()
    await layer.group_add("privacy", channel)
    await layer.group_send("privacy", FRAME)

    client = redis.Redis.from_url(REDIS_URL)
    stored: list[bytes] = []
    for key in client.scan_iter(f"{prefix}*"):
        if client.type(key) == b"zset":
            stored += client.zrange(key, 0, -1)
        elif client.type(key) == b"string":
            stored.append(client.get(key) or b"")
    assert stored, "the frame waits in Redis"
    assert not any(CPF.encode() in value or b"529982247" in value for value in stored)
    assert await layer.receive(channel) == FRAME
    await layer.flush()
