"""The Channels layer on PostgreSQL (no Redis): channels_postgres, made to survive restarts.

channels_postgres 1.1.4 listens for NOTIFY on one connection opened once per process. When the
database restarts, that listening task dies with the connection and is never started again:
the process keeps accepting sockets but no group message reaches them until it is restarted.

- The listener here reconnects (backing off to a few seconds) and listens again. It does not
  re-read the message table on reconnecting as the library does at start-up: delivered
  messages stay there until they expire, so that would hand out the last minute twice.
- Pooled connections are checked when taken from the pool, so the first sends after a
  restart do not fail on connections the server has closed. The check costs no round trip
  (psycopg's own does one, and a frame's send took twice as long with it): an idle pooled
  connection has nothing to read unless the server closed it or told it why.
- `group_send` is one statement (upstream: three, each on its own pooled connection) and
  skips the channel a message names as its `origin`: the chat consumer sends a turn's
  frames to the asking socket directly, so with one tab open a frame costs one cheap INSERT
  of no rows, no NOTIFY and no wake-up of every listening process.
"""

from __future__ import annotations

import asyncio
import logging
import select
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from channels_postgres.core import PostgresChannelLayer as _UpstreamLayer
from channels_postgres.db import GROUP_CHANNEL_TABLE, MESSAGE_TABLE
from psycopg import sql
from psycopg_pool import PoolTimeout

logger = logging.getLogger(__name__)
_LISTEN_CHANNEL = "channels_postgres_messages"
_MAX_BACKOFF_S = 5.0
_GROUP_SEND_SQL = sql.SQL(
    "INSERT INTO {messages} (channel, message, expire) "
    "SELECT DISTINCT channel, %s, %s FROM {groups} WHERE group_key = %s AND channel <> %s"
).format(messages=sql.Identifier(MESSAGE_TABLE), groups=sql.Identifier(GROUP_CHANNEL_TABLE))


async def _not_closed_by_server(connection: psycopg.AsyncConnection[Any]) -> None:
    """Pool check: refuse a connection that is closed or has unread input (EOF, a FATAL)."""
    if connection.closed or connection.broken:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([connection.fileno()], [], [], 0)
    if readable:
        await connection.close()  # so that the pool drops it rather than take it back
        raise psycopg.OperationalError("the server closed the connection")


class PostgresChannelLayer(_UpstreamLayer):
    def __init__(self, **kwargs: Any) -> None:
        options = {
            "check": _not_closed_by_server,
            "timeout": 10,  # seconds to wait for a pooled connection; the default is 30
            **kwargs.get("PSYCOPG_OPTIONS", {}),
        }
        super().__init__(**{**kwargs, "PSYCOPG_OPTIONS": options})

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """Send to every channel of the group but the message's `origin`, in one statement."""
        assert self.require_valid_group_name(group), "Group name not valid"
        origin = message.get("origin")
        expire = datetime.now(UTC) + timedelta(seconds=self.expiry)
        args = (self.serialize(message), expire, self._group_key(group), str(origin or ""))
        pool = await self.django_db.get_db_pool(db_params=self.db_params)
        async with pool.connection() as connection:
            await connection.execute(_GROUP_SEND_SQL, args)

    async def listen_to_all_channels(self) -> None:
        """Listen for messages; reconnect and listen again whenever the connection is lost."""
        delay = 0.25
        first = True
        while True:
            try:
                if first:
                    first = False
                    await super().listen_to_all_channels()  # also delivers what was queued
                else:
                    await self._listen()
                return  # shut down on purpose
            except (psycopg.Error, PoolTimeout, OSError) as exc:
                logger.warning("channel layer: lost the database (%s); listening again", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF_S)

    async def _listen(self) -> None:
        """The upstream LISTEN loop, without its start-up re-delivery."""
        conninfo = psycopg.conninfo.make_conninfo(conninfo="", **self.db_params)
        async with await psycopg.AsyncConnection.connect(
            conninfo=conninfo, autocommit=True
        ) as connection:
            await connection.execute(f"LISTEN {_LISTEN_CHANNEL};")
            if self.listener_task_is_running is not None:
                self.listener_task_is_running.set()  # unset if the first connection failed
            logger.info("channel layer: listening again")
            async for event in connection.notifies():
                if event.payload == "1:shutdown":
                    if self.listener_task_is_running is not None:
                        self.listener_task_is_running.clear()
                    return
                channel = event.payload.split(":")[1]
                # As upstream: another process holds this channel's lock and delivers it.
                if self._channel_advisory_locks.get(channel, False):
                    self._get_or_create_queue(channel).put_nowait(event.payload)


def expired_messages_delete() -> int:
    """Delete the layer's expired messages: they hold questions and answers as sent.

    Upstream deletes a message only when a listener takes it; one whose socket had gone
    stayed in the table after its expiry, personal data and all. Celery beat runs this.
    """
    from django.conf import settings
    from django.db import connections

    backend = str(settings.CHANNEL_LAYERS["default"]["BACKEND"])
    if not backend.endswith("PostgresChannelLayer"):
        return 0
    connection = connections["channels_postgres"]
    table = connection.ops.quote_name(MESSAGE_TABLE)  # the library's constant
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE expire < now()")  # noqa: S608
        return int(cursor.rowcount)
