"""Count a chat turn's database round trips, and time the chat socket's per-frame session check.

Drives the real ASGI app (`chatrag.asgi`) with a WebSocket client signed in as a bench user,
on the demo knowledge base (run `manage.py seed_demo` once first), and asks every judged
question of demo/eval/tasks.jsonl (its history stored as earlier messages) in a conversation
of its own. Every statement sent through psycopg by any thread (Django's cursors, the search
engine's pool, the pool's health checks) is counted from the `message` frame to the turn's
last frame, and so are transactions (each costs a BEGIN and a COMMIT round trip):

- statements: what Django and the search engine send (the pools' empty-query checks apart);
- checks: the connection pools' health checks, one per connection taken from a pool;
- commits: autocommit writes and committed transactions that wrote: each waits for the
  disk (fdatasync; about 3.5 ms on the 2-core machine, where a round trip is 0.1 ms);
- round trips: statements + checks + BEGIN/COMMIT.

Then it times `open` frames (send, ping, pong) and the session check alone.

Set REDIS_URL to run the rate limit, the rewrite cache and the channel layer on Redis as in
production; without it they are database statements too (their tables are named in the
breakdown). `--verbose` lists one turn's statements in order.

    python scripts/count_turn_queries.py [--limit N] [--frames 200] [--verbose] [--json out]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
os.environ.setdefault("CHATRAG_DEBUG", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("CHATRAG_RATE_LIMIT_PER_MINUTE", "100000")


class RoundTrips:
    """Every psycopg statement, commit and rollback of the process, from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on = False
        self.statements: list[tuple[str, str]] = []  # (thread name, SQL)
        self.transactions = 0
        self.commits = 0  # what waits for the disk: autocommit writes and committed writes
        self.wrote: set[int] = set()  # connections in a transaction that has written

    def install(self) -> None:
        import psycopg

        recorder = self

        def wrap_execute(original: Any) -> Any:
            def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                recorder.statement(query, cursor)
                return original(cursor, query, *args, **kwargs)

            return execute

        def wrap_end(original: Any, commit: bool) -> Any:
            def end(connection: Any) -> Any:
                if connection.info.transaction_status != 0:  # IDLE: nothing to end
                    recorder.transaction(commit and id(connection) in recorder.wrote)
                recorder.wrote.discard(id(connection))
                return original(connection)

            return end

        psycopg.Cursor.execute = wrap_execute(psycopg.Cursor.execute)  # type: ignore[method-assign]
        psycopg.Cursor.executemany = wrap_execute(psycopg.Cursor.executemany)  # type: ignore[method-assign]
        psycopg.Connection.commit = wrap_end(psycopg.Connection.commit, True)  # type: ignore[method-assign]
        psycopg.Connection.rollback = wrap_end(psycopg.Connection.rollback, False)  # type: ignore[method-assign]

    def statement(self, query: Any, cursor: Any) -> None:
        if not self.on:
            return
        if not isinstance(query, str | bytes):
            query = query.as_string(cursor.connection)
        if isinstance(query, bytes):
            query = query.decode()
        flat = " ".join(query.split())
        with self.lock:
            self.statements.append((threading.current_thread().name, flat))
            if flat.split(" ", 1)[0] in {"INSERT", "UPDATE", "DELETE"}:
                if cursor.connection.autocommit:
                    self.commits += 1
                else:
                    self.wrote.add(id(cursor.connection))

    def transaction(self, wrote: bool) -> None:
        if self.on:
            with self.lock:
                self.transactions += 1
                self.commits += wrote

    @contextmanager
    def counting(self) -> Iterator[RoundTrips]:
        with self.lock:
            self.statements, self.transactions, self.commits, self.on = [], 0, 0, True
        try:
            yield self
        finally:
            self.on = False

    def summary(self) -> dict[str, Any]:
        checks = sum(1 for _, sql in self.statements if not sql)
        statements = len(self.statements) - checks
        return {
            "statements": statements,
            "checks": checks,
            "transactions": self.transactions,
            "commits": self.commits,
            "round_trips": statements + checks + 2 * self.transactions,
            "by_table": dict(Counter(_table(sql) for _, sql in self.statements if sql)),
        }


_TABLE = re.compile(r'(?:FROM|INTO|UPDATE)\s+"?([a-z_]+)"?', re.IGNORECASE)


def _table(sql: str) -> str:
    if sql.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK")):
        return "savepoints"
    found = _TABLE.search(sql)
    return found.group(1) if found else sql.split(" ", 1)[0].lower()


async def _ignore(event: dict[str, Any]) -> None:
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=Path, default=BASE_DIR / "demo/eval/tasks.jsonl")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--frames", type=int, default=200, help="open frames to time")
    parser.add_argument("--verbose", action="store_true", help="list one turn's statements")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    trips = RoundTrips()
    trips.install()
    import django

    django.setup()
    report = asyncio.run(_measure(args, trips))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


async def _measure(args: argparse.Namespace, trips: RoundTrips) -> dict[str, Any]:
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    from chatrag.asgi import application
    from conversations.consumers import ChatConsumer
    from conversations.models import Conversation, Message
    from conversations.services import message_store_user
    from conversations.turn import turn_run
    from retrieval.embeddings import get_embedder
    from retrieval.pipeline.metrics import percentile

    tasks = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
    if args.limit:
        tasks = tasks[: args.limit]

    def sign_in() -> tuple[User, str]:
        user, _ = User.objects.get_or_create(username="queries-bench")
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        return user, str(session.session_key)

    user, key = await sync_to_async(sign_in)()
    # A first, uncounted turn, before the socket listens: models, caches and pools warm up
    # (the first turn of a process loads what it needs on the event loop).
    await sync_to_async(get_embedder().embed_queries)(["aquecimento"])
    warm = await sync_to_async(Conversation.objects.create)(owner=user)
    first = await sync_to_async(message_store_user)(conversation=warm, text=tasks[0]["question"])
    await turn_run(message_id=first.id, emit=_ignore)
    await sync_to_async(warm.delete)()
    socket = WebsocketCommunicator(
        application,
        "/ws/chat/",
        headers=[
            (b"host", b"127.0.0.1:8000"),
            (b"origin", b"http://127.0.0.1:8000"),
            (b"cookie", f"sessionid={key}".encode()),
        ],
    )
    connected, code = await socket.connect(timeout=30)
    assert connected, code
    await socket.send_json_to({"type": "ping"})  # the socket's own checks on connecting are done
    assert (await socket.receive_json_from(timeout=30))["type"] == "pong"

    async def frames_until(*types: str) -> list[dict[str, Any]]:
        frames = []
        while True:
            frames.append(await socket.receive_json_from(timeout=60))
            if frames[-1]["type"] in types:
                return frames

    async def ask(task: dict[str, Any]) -> tuple[dict[str, Any], str]:
        conversation = await sync_to_async(Conversation.objects.create)(owner=user)
        for item in task["history"]:
            await sync_to_async(Message.objects.create)(
                conversation=conversation, role=item["role"], text=item["text"]
            )
        frame = {"type": "message", "conversation": conversation.id, "text": task["question"]}
        with trips.counting():
            await socket.send_json_to(frame)
            last = (await frames_until("done", "clarify", "error"))[-1]["type"]
            from conversations.turn import RUNNING

            await asyncio.gather(*RUNNING)  # its last writes (none after the frame)
        if args.verbose and not per_turn:
            print(f"the statements of one turn ({task['id']}), in order:")
            for thread, sql in trips.statements:
                print(f"  [{thread}] {sql[:150] or '(pool check)'}")
        await sync_to_async(conversation.delete)()
        return trips.summary(), last

    per_turn: list[dict[str, Any]] = []
    ends: Counter[str] = Counter()
    for task in tasks:
        summary, last = await ask(task)
        per_turn.append(summary)
        ends[last] += 1

    # --- the per-frame cost: `open` of an owned conversation, then a ping's pong -------------
    conversation = await sync_to_async(Conversation.objects.create)(owner=user, title="bench")
    open_ms: list[float] = []
    with trips.counting():
        await socket.send_json_to({"type": "open", "conversation": conversation.id})
        await socket.send_json_to({"type": "ping"})
        await frames_until("pong")
    open_trips = trips.summary()
    for _ in range(args.frames):
        start = time.perf_counter()
        await socket.send_json_to({"type": "open", "conversation": conversation.id})
        await socket.send_json_to({"type": "ping"})
        await frames_until("pong")
        open_ms.append((time.perf_counter() - start) * 1000)
    ping_ms: list[float] = []
    for _ in range(args.frames):
        start = time.perf_counter()
        await socket.send_json_to({"type": "ping"})
        await frames_until("pong")
        ping_ms.append((time.perf_counter() - start) * 1000)
    await socket.disconnect()

    # --- the session check alone, as a socket runs it -------------------------------------------
    consumer = ChatConsumer()
    consumer.scope = {"session": SessionStore(session_key=key), "user": user}
    consumer.user = user
    check = consumer._session_still_valid
    check_ms: list[float] = []
    assert await check()  # the socket's first check, on connecting
    with trips.counting():
        assert await check()
    check_trips = trips.summary()
    for _ in range(args.frames):
        start = time.perf_counter()
        await check()
        check_ms.append((time.perf_counter() - start) * 1000)
    await sync_to_async(conversation.delete)()

    def mean(field: str) -> float:
        return sum(t[field] for t in per_turn) / len(per_turn)

    tables: Counter[str] = Counter()
    for t in per_turn:
        tables.update(t["by_table"])
    report = {
        "turns": len(per_turn),
        "ends": dict(ends),
        "per_turn": {
            f: mean(f) for f in ("statements", "checks", "transactions", "commits", "round_trips")
        },
        "per_turn_max": {
            f: max(t[f] for t in per_turn)
            for f in ("statements", "transactions", "commits", "round_trips")
        },
        "statements_by_table": {k: v / len(per_turn) for k, v in tables.most_common()},
        "open_frame": {
            **{
                k: open_trips[k]
                for k in ("statements", "checks", "transactions", "commits", "round_trips")
            },
            "p50_ms": percentile(open_ms, 50),
            "p95_ms": percentile(open_ms, 95),
        },
        "ping_frame": {"p50_ms": percentile(ping_ms, 50), "p95_ms": percentile(ping_ms, 95)},
        "session_check": {
            **{
                k: check_trips[k]
                for k in ("statements", "checks", "transactions", "commits", "round_trips")
            },
            "p50_ms": percentile(check_ms, 50),
            "p95_ms": percentile(check_ms, 95),
        },
    }
    layer = os.environ.get("REDIS_URL") and "Redis" or "the database"
    print(f"{len(per_turn)} turns {dict(ends)}; cache, rate limit and channel layer on {layer}")
    print(f"{'per turn':<22} {'mean':>7} {'max':>5}")
    for field in ("statements", "checks", "transactions", "commits", "round_trips"):
        top = report["per_turn_max"].get(field, "")
        print(f"{field:<22} {report['per_turn'][field]:>7.1f} {top:>5}")
    print("statements per turn by table:")
    for table, n in report["statements_by_table"].items():
        print(f"  {table:<32} {n:>5.1f}")
    for name in ("open_frame", "ping_frame", "session_check"):
        row = report[name]
        counts = (
            f"  {row['statements']} statements, {row['round_trips']} round trips"
            if "statements" in row
            else ""
        )
        print(f"{name:<14} p50 {row['p50_ms']:6.2f} ms  p95 {row['p95_ms']:6.2f} ms{counts}")
    return report


if __name__ == "__main__":
    raise SystemExit(main())
