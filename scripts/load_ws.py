"""Hold N chat users in conversation over WebSockets and time every turn's frames.

Each user has a session of its own (made directly in the database), one conversation, and
asks the next question as soon as the last answer is done (plus `--think` seconds). For each
step of N it reports turns/s and p50/p95 of the time from sending a message to the `rewrite`
frame, the `sources` frame, the first `delta` and `done`, and the app's overhead: time to the
first delta minus the model's own time (the fake model waits `--model-latency` before the
first byte of each of the two calls a turn makes: the rewrite and the answer). The largest N
whose p95 overhead stays under `--budget-ms` with no failed turn is "held".

    python scripts/load_ws.py --serve                  # make load: everything it needs
    python scripts/load_ws.py --url http://127.0.0.1:8000 --model-latency 0.3
    python scripts/load_ws.py --serve --flood 500       # one user's flood, instead of the steps

--flood N sends N frames of each inbound type that reaches the database (open, stop, a
message to someone else's conversation) on one socket, then opens --flood-sockets sockets as
one user, and prints what came back and how many database transactions each flood cost
(PostgreSQL's statistics, read 11 s after each: an idle row shows the noise).

--worst-case runs the first of --steps ordinary users for --duration seconds alone, then
again while one more user sends worst-case messages (the attacks of issue 38: "http://" +
"a." x 2000, 3,990 copies of one Arabic ligature, and others, each up to 4,000 characters) at
--worst-rate messages a minute (the default allowance, CHATRAG_RATE_LIMIT_PER_MINUTE), and
prints the ordinary turns' p50/p95 both times and the worst-case turns' own times.

--serve creates (or reuses) the database `--database` on the server the settings point to
(the embedded one by default), migrates it, seeds the demo knowledge base and users
(`manage.py seed_demo`), starts the fake model server (`chatrag.dev.fakemodel`) and daphne on
free ports, and stops them at the end. Without --serve, run it with the same environment as
the app (DATABASE_URL...) so the sessions it makes are the app's, and rate limits
(CHATRAG_RATE_LIMIT_PER_MINUTE, CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE) high enough for the load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
os.environ.setdefault("CHATRAG_DEBUG", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

QUESTIONS = [
    "quantos dias de férias eu tenho por ano?",
    "qual o valor do vale-refeição por dia?",
    "como peço reembolso de despesas de viagem?",
    "posso trabalhar remoto em tempo integral?",
    "como funciona o pedido de demissão?",
    "estagiário recebe vale-refeição?",
    "qual o prazo para pedir reembolso?",
    "posso vender parte das férias?",
]
FRAMES = ("rewrite", "sources", "delta", "done")
MODEL_CALLS_BEFORE_FIRST_DELTA = 2  # the rewrite, then the answer's first byte
TURN_TIMEOUT_S = 60.0  # a turn with no `done` by then counts as failed


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Turn:
    ms: dict[str, float] = field(default_factory=dict)  # first arrival of each frame type
    failure: str = ""


@dataclass
class Step:
    users: int
    seconds: float = 0.0
    turns: list[Turn] = field(default_factory=list)
    connect_failures: int = 0

    @property
    def completed(self) -> list[Turn]:
        return [t for t in self.turns if not t.failure and "done" in t.ms]

    def summary(self, model_ms: float, budget_ms: float) -> dict[str, Any]:
        from retrieval.pipeline.metrics import percentile

        done = self.completed
        out: dict[str, Any] = {
            "users": self.users,
            "seconds": round(self.seconds, 2),
            "turns": len(done),
            "failed": len(self.turns) - len(done) + self.connect_failures,
            "failures": sorted({t.failure for t in self.turns if t.failure})[:5],
            "turns_per_s": round(len(done) / self.seconds, 2) if self.seconds else 0.0,
        }
        for frame in FRAMES:
            values = [t.ms[frame] for t in done if frame in t.ms]
            out[frame] = {
                "p50": round(percentile(values, 50), 1),
                "p95": round(percentile(values, 95), 1),
            }
        overhead = [t.ms["delta"] - model_ms for t in done if "delta" in t.ms]
        out["overhead"] = {
            "p50": round(percentile(overhead, 50), 1),
            "p95": round(percentile(overhead, 95), 1),
        }
        out["held"] = bool(done) and out["failed"] == 0 and out["overhead"]["p95"] < budget_ms
        return out


async def _user(
    number: int, url: str, cookie: str, step: Step, deadline: float, think: float
) -> None:
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/ws/chat/"
    headers = {"Cookie": f"sessionid={cookie}", "Origin": url}
    try:
        socket = await connect(ws_url, additional_headers=headers, open_timeout=30)
    except Exception:
        step.connect_failures += 1
        return
    conversation: int | None = None
    question = number
    async with socket:
        while True:  # at least one turn, then until the deadline
            turn = Turn()
            step.turns.append(turn)
            text = QUESTIONS[question % len(QUESTIONS)]
            question += 1
            frame = {"type": "message", "conversation": conversation, "text": text}
            start = time.perf_counter()
            await socket.send(json.dumps(frame))
            try:
                async with asyncio.timeout(TURN_TIMEOUT_S):
                    while True:
                        event = json.loads(await socket.recv())
                        kind = event.get("type")
                        if kind == "conversation":
                            conversation = event["id"]
                        if kind in FRAMES:
                            turn.ms.setdefault(kind, (time.perf_counter() - start) * 1000)
                        if kind == "done":
                            break
                        if kind in {"error", "clarify"}:
                            turn.failure = f"{kind}: {event.get('code') or event.get('detail')}"
                            break
            except TimeoutError:
                turn.failure = "timeout"
                return
            except Exception as exc:  # the socket closed under us
                turn.failure = f"socket: {exc.__class__.__name__}"
                return
            if time.monotonic() >= deadline:
                return
            if think:
                await asyncio.sleep(think)


async def run_step(url: str, cookies: list[str], users: int, seconds: float, think: float) -> Step:
    step = Step(users=users)
    started = time.monotonic()
    deadline = started + seconds
    await asyncio.gather(*(_user(n, url, cookies[n], step, deadline, think) for n in range(users)))
    step.seconds = time.monotonic() - started
    return step


# --- one user sending worst-case messages ------------------------------------------------------

WORST_CASE = (
    "http://" + "a." * 1996,
    "\ufdfa" * 3990,  # 18 characters each once in NFKC
    "Ana Maria " * 400,
    "(" * 3999,
    "1." * 2000,
    "123.456.789-09 " * 266,
)


async def _attacker(
    url: str, cookie: str, deadline: float, per_minute: float, out: list[dict[str, Any]]
) -> None:
    """Send worst-case messages at `per_minute`, each in a conversation of its own, waiting
    for each turn's end (a user has one turn running at a time)."""
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/ws/chat/"
    headers = {"Cookie": f"sessionid={cookie}", "Origin": url}
    gap = 60.0 / per_minute
    async with await connect(ws_url, additional_headers=headers, open_timeout=30) as socket:
        number = 0
        while time.monotonic() < deadline:
            text = WORST_CASE[number % len(WORST_CASE)][:4000]
            number += 1
            sent = time.monotonic()
            start = time.perf_counter()
            await socket.send(json.dumps({"type": "message", "conversation": None, "text": text}))
            result: dict[str, Any] = {"chars": len(text), "kind": "timeout"}
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TURN_TIMEOUT_S * 3):
                    while True:
                        event = json.loads(await socket.recv())
                        kind = event.get("type")
                        if kind in {"done", "error", "clarify"}:
                            result["kind"] = f"{kind}:{event.get('code') or ''}".rstrip(":")
                            break
            result["ms"] = round((time.perf_counter() - start) * 1000, 1)
            out.append(result)
            await asyncio.sleep(max(0.0, sent + gap - time.monotonic()))


async def run_worst_case(
    url: str, cookies: list[str], users: int, seconds: float, think: float, per_minute: float
) -> tuple[Step, list[dict[str, Any]]]:
    """`users` ordinary users for `seconds` while the last cookie's user sends worst cases."""
    step = Step(users=users)
    attacks: list[dict[str, Any]] = []
    started = time.monotonic()
    deadline = started + seconds
    ordinary = (_user(n, url, cookies[n], step, deadline, think) for n in range(users))
    await asyncio.gather(*ordinary, _attacker(url, cookies[users], deadline, per_minute, attacks))
    step.seconds = time.monotonic() - started
    return step, attacks


def run_worst(args: argparse.Namespace, url: str, users: int, model_ms: float) -> dict[str, Any]:
    cookies = make_sessions(users + 1)
    warm = asyncio.run(run_step(url, cookies, 1, 0.01, 0.0))
    if not warm.completed:
        raise SystemExit(f"the warm-up turn failed: {[t.failure for t in warm.turns]}")
    alone = asyncio.run(run_step(url, cookies, users, args.duration, args.think))
    beside, attacks = asyncio.run(
        run_worst_case(url, cookies, users, args.duration, args.think, args.worst_rate)
    )
    return {
        "alone": alone.summary(model_ms, args.budget_ms),
        "beside_worst_case": beside.summary(model_ms, args.budget_ms),
        "worst_case_turns": attacks,
        "worst_rate_per_minute": args.worst_rate,
    }


def _worst_table(result: dict[str, Any]) -> str:
    rows = [
        {**result["alone"], "users": result["alone"]["users"]},
        result["beside_worst_case"],
    ]
    lines = _table(rows).splitlines()
    lines[1] += "   ordinary users alone"
    lines[2] += "   beside one user sending worst-case messages"
    attacks = result["worst_case_turns"]
    times = sorted(a["ms"] for a in attacks)
    kinds = sorted({a["kind"] for a in attacks})
    lines.append(
        f"worst-case turns: {len(attacks)} at {result['worst_rate_per_minute']:.0f}/min, "
        f"end after {times[0] if times else 0:.0f}..{times[-1] if times else 0:.0f} ms "
        f"({', '.join(kinds)})"
    )
    return "\n".join(lines)


# --- sessions ---------------------------------------------------------------------------------


def make_sessions(count: int, prefix: str = "load") -> list[str]:
    """`count` load users (no password, no groups) with a session each, made in the database."""
    import django

    django.setup()
    from django.contrib.auth.models import User

    keys = []
    for number in range(1, count + 1):
        user, created = User.objects.get_or_create(username=f"{prefix}-{number:03d}")
        if created:
            user.set_unusable_password()
            user.save()
        keys.append(session_for(user))
    return keys


def session_for(user: Any) -> str:
    """A new session signed in as `user`, as the login page would have made it; its key."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

    backend = "django.contrib.auth.backends.ModelBackend"
    if backend not in settings.AUTHENTICATION_BACKENDS:
        backend = settings.AUTHENTICATION_BACKENDS[-1]
    session = import_module(settings.SESSION_ENGINE).SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = backend
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return str(session.session_key)


# --- one user's flood of frames and sockets (--flood) -----------------------------------------

# PostgreSQL flushes an idle backend's statistics within 10 s: read its counters after that.
STATS_SETTLE_S = 11.0


@dataclass
class FloodUser:
    cookie: str
    conversation: int
    message: int  # a finished turn's question: what a stop frame names


def flood_users(names: list[str]) -> dict[str, FloodUser]:
    """A user per name (`flood-<name>`), with a session, a conversation and a finished turn."""
    import django

    django.setup()
    from django.contrib.auth.models import User

    from conversations.models import Conversation, Message

    users = {}
    for name in names:
        user, created = User.objects.get_or_create(username=f"flood-{name}")
        if created:
            user.set_unusable_password()
            user.save()
        conversation = Conversation.objects.create(owner=user, title="flood")
        message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER, text="oi"
        )
        users[name] = FloodUser(session_for(user), conversation.id, message.id)
    return users


def database_transactions() -> int:
    """Transactions the app's database has run (every autocommit statement is one)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _socket_url(url: str) -> str:
    return url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/ws/chat/"


async def flood_frames(url: str, cookie: str, frame: dict[str, Any], count: int) -> dict[str, Any]:
    """Send `count` copies of `frame` on one socket as fast as it takes them, then a ping;
    count what came back before the pong (frames are answered in order)."""
    from websockets.asyncio.client import connect

    headers = {"Cookie": f"sessionid={cookie}", "Origin": url}
    replies: dict[str, int] = {}
    async with connect(_socket_url(url), additional_headers=headers, open_timeout=30) as socket:
        await socket.send(json.dumps({"type": "ping"}))
        await socket.recv()
        start = time.perf_counter()
        for _ in range(count):
            await socket.send(json.dumps(frame))
        await socket.send(json.dumps({"type": "ping"}))
        closed = ""
        try:
            while True:
                event = json.loads(await asyncio.wait_for(socket.recv(), TURN_TIMEOUT_S))
                if event.get("type") == "pong":
                    break
                kind = str(event.get("type"))
                if kind == "error":
                    kind += ":" + str(event.get("code"))
                replies[kind] = replies.get(kind, 0) + 1
        except Exception as exc:  # closed, or no pong in time: say so
            closed = exc.__class__.__name__
        seconds = time.perf_counter() - start
    return {
        "frames": count,
        "seconds": round(seconds, 3),
        "frames_per_s": round(count / seconds, 1) if seconds else 0.0,
        "replies": replies,
        "socket": closed or "open",
    }


async def flood_sockets(url: str, cookie: str, count: int) -> dict[str, Any]:
    """Open `count` sockets as one user, one after another, and keep those the app accepts."""
    from websockets.asyncio.client import connect

    headers = {"Cookie": f"sessionid={cookie}", "Origin": url}
    held: list[Any] = []
    refused: dict[str, int] = {}
    connect_ms: list[float] = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            try:
                socket = await connect(_socket_url(url), additional_headers=headers)
            except Exception as exc:
                refused[exc.__class__.__name__] = refused.get(exc.__class__.__name__, 0) + 1
                continue
            try:
                await socket.send(json.dumps({"type": "ping"}))
                event = json.loads(await asyncio.wait_for(socket.recv(), TURN_TIMEOUT_S))
            except Exception:  # closed before the ping got there: by its close code
                event = {}
            connect_ms.append((time.perf_counter() - start) * 1000)
            if event.get("type") == "pong":
                held.append(socket)
                continue
            await socket.wait_closed()
            why = f"{event.get('code') or 'no frame'} (close {socket.close_code})"
            refused[why] = refused.get(why, 0) + 1
    finally:
        for socket in held:
            await socket.close()
    from retrieval.pipeline.metrics import percentile

    return {
        "sockets": count,
        "accepted": len(held),
        "refused": refused,
        "connect_ms": {
            "p50": round(percentile(connect_ms, 50), 1),
            "p95": round(percentile(connect_ms, 95), 1),
        },
    }


def run_flood(url: str, count: int, sockets: int) -> dict[str, Any]:
    """One user's flood of each inbound frame type, and of sockets; with the database
    transactions each cost (read from PostgreSQL's statistics, idle time included)."""
    users = flood_users(["open", "stop", "message", "sockets"])
    other = flood_users(["victim"])["victim"]  # a conversation the flooding user may not read
    jobs: list[tuple[str, Any]] = [
        ("idle (nothing sent)", None),
        ("open", {"type": "open", "conversation": users["open"].conversation}),
        ("stop", {"type": "stop", "message_id": users["stop"].message}),
        (
            "message (not hers)",
            {"type": "message", "conversation": other.conversation, "text": "oi"},
        ),
    ]
    rows: list[dict[str, Any]] = []
    time.sleep(STATS_SETTLE_S)
    before = database_transactions()
    for label, frame in jobs:
        if frame is None:
            row: dict[str, Any] = {"frames": 0, "seconds": 0.0, "frames_per_s": 0.0}
            row.update(replies={}, socket="-")
        else:
            name = label.split()[0]
            row = asyncio.run(flood_frames(url, users[name].cookie, frame, count))
        time.sleep(STATS_SETTLE_S)
        after = database_transactions()
        row.update(kind=label, db_transactions=after - before - 1)  # less the reading itself
        rows.append(row)
        before = after
    sockets_row = asyncio.run(flood_sockets(url, users["sockets"].cookie, sockets))
    time.sleep(STATS_SETTLE_S)
    sockets_row["db_transactions"] = database_transactions() - before - 1
    return {"frames": rows, "sockets": sockets_row}


def _flood_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'flooded frame':<20} {'frames':>6} {'seconds':>8} {'frames/s':>9} {'db xacts':>9}"
        f" {'per frame':>9}  replies before the pong; socket after"
    ]
    for row in result["frames"]:
        per = row["db_transactions"] / row["frames"] if row["frames"] else 0.0
        replies = ", ".join(f"{k} {v}" for k, v in sorted(row["replies"].items())) or "none"
        lines.append(
            f"{row['kind']:<20} {row['frames']:>6} {row['seconds']:>8.2f} "
            f"{row['frames_per_s']:>9.1f} {row['db_transactions']:>9} {per:>9.2f}  "
            f"{replies}; {row['socket']}"
        )
    s = result["sockets"]
    refused = ", ".join(f"{k} {v}" for k, v in sorted(s["refused"].items())) or "none"
    lines.append(
        f"\nsockets opened as one user: {s['sockets']}, accepted {s['accepted']}, "
        f"refused: {refused}; connect+first reply p50/p95 {s['connect_ms']['p50']:.0f}/"
        f"{s['connect_ms']['p95']:.0f} ms; {s['db_transactions']} db transactions"
    )
    return "\n".join(lines)


# --- serving everything (--serve) -------------------------------------------------------------


def _base_database() -> dict[str, Any]:
    """Connection settings of the server the app's settings use (embedded by default)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        import dj_database_url

        return dict(dj_database_url.parse(url))
    from chatrag.dev import db as devdb

    return dict(devdb.ensure_running())


def _url_for(db: dict[str, Any], name: str) -> str:
    from urllib.parse import quote

    options = db.get("OPTIONS") or {}
    auth = quote(db.get("USER") or "postgres", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    host = quote(db.get("HOST") or options.get("host") or "localhost", safe="")
    port = db.get("PORT") or options.get("port") or 5432
    return f"postgresql://{auth}@{host}:{port}/{name}"


def _admin(db: dict[str, Any], sql: str) -> None:
    import psycopg

    options = db.get("OPTIONS") or {}
    params = {
        "host": db.get("HOST") or options.get("host"),
        "port": db.get("PORT") or options.get("port"),
        "user": db.get("USER"),
        "password": db.get("PASSWORD"),
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**{k: v for k, v in params.items() if v}) as conn:
        conn.execute(sql)


def _manage(env: dict[str, str], *args: str) -> None:
    command = [sys.executable, "manage.py", *args]
    done = subprocess.run(command, cwd=BASE_DIR, env=env, capture_output=True, text=True)
    if done.returncode:
        output = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{output}")


@contextlib.contextmanager
def serve(args: argparse.Namespace) -> Iterator[str]:
    """Database, fake model server and daphne for the load; yields the app's URL."""
    from chatrag.dev import server as devserver

    base = _base_database()
    name = args.database
    with contextlib.suppress(Exception):  # psycopg's DuplicateDatabase: reuse it
        _admin(base, f'CREATE DATABASE "{name}"')
    env = {
        **os.environ,
        "DATABASE_URL": _url_for(base, name),
        "CHATRAG_DEBUG": "1",
        "CHATRAG_RATE_LIMIT_PER_MINUTE": "100000",
        "PYTHONUNBUFFERED": "1",
    }
    if not args.flood:  # the steps' users ask as fast as they are answered; a flood meets
        env["CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE"] = "100000"  # the default frame allowance
    if args.kb:
        env["CHATRAG_DEMO_KB"] = str(Path(args.kb).resolve())
    if args.embedder:
        env["CHATRAG_EMBEDDER"] = args.embedder
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "CHATRAG_EMBEDDER") if k in env})
    log_dir = Path(args.logs).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []
    try:
        print(f"database {name}: migrating and seeding the demo knowledge base...", flush=True)
        _manage(env, "migrate", "--noinput", "--verbosity", "0")
        _manage(env, "seed_demo")
        model_port = devserver.free_port()
        fake = [sys.executable, "-m", "chatrag.dev.fakemodel", "--port", str(model_port)]
        fake += ["--latency", str(args.model_latency), "--gap", str(args.model_gap)]
        fake += ["--pieces", str(args.model_pieces)]
        with (log_dir / "load-fakemodel.log").open("wb") as out:
            children.append(
                subprocess.Popen(fake, cwd=BASE_DIR, stdout=out, stderr=subprocess.STDOUT)
            )
        env.update(
            CHATRAG_LLM_BACKEND="retrieval.pipeline.llm.OllamaChat",
            CHATRAG_LLM_URL=f"http://127.0.0.1:{model_port}",
            CHATRAG_LLM_MODEL="fake",
        )
        env.pop("CHATRAG_LLM_API_KEY", None)
        port = devserver.free_port()
        web = devserver.start_web(env, port, log_dir / "load-daphne.log")
        children.append(web)
        url = f"http://127.0.0.1:{port}"
        devserver.wait_healthy(url, web)
        print(f"app on {url}, fake model on port {model_port}", flush=True)
        yield url
    finally:
        for child in reversed(children):
            devserver.stop_process(child)
        if args.drop:
            with contextlib.suppress(Exception):  # this process's own sessions' connection
                from django.db import connections

                connections.close_all()
            with contextlib.suppress(Exception):
                _admin(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- the run ----------------------------------------------------------------------------------


def _table(rows: list[dict[str, Any]]) -> str:
    labels = ("rewrite", "sources", "1st delta", "done", "overhead")
    head = f"{'N':>3} {'turns':>6} {'fail':>5} {'turns/s':>8}"
    head += "".join(f"{label + ' p50/p95':>19}" for label in labels) + "  held"
    lines = [head]
    for row in rows:
        line = f"{row['users']:>3} {row['turns']:>6} {row['failed']:>5} {row['turns_per_s']:>8.2f}"
        for key in (*FRAMES, "overhead"):
            line += f"{row[key]['p50']:>10.0f}/{row[key]['p95']:<8.0f}"
        lines.append(line + ("  yes" if row["held"] else "  no"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else "")
    parser.add_argument("--url", help="an app already running (default with --serve: its own)")
    parser.add_argument("--serve", action="store_true", help="start everything it needs")
    parser.add_argument("--steps", default="1,2,4,8,16,32", help="numbers of users, in order")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per step")
    parser.add_argument("--think", type=float, default=0.0, help="seconds between a user's turns")
    parser.add_argument("--model-latency", type=float, default=0.3)
    parser.add_argument("--model-gap", type=float, default=0.02)
    parser.add_argument("--model-pieces", type=int, default=20)
    parser.add_argument("--budget-ms", type=float, default=300.0, help="p95 overhead to hold")
    parser.add_argument("--stop-after-miss", action="store_true", help="stop at the first miss")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--database", default="chatrag_load", help="--serve: database name")
    parser.add_argument("--drop", action="store_true", help="--serve: drop it at the end")
    parser.add_argument("--kb", help="--serve: knowledge base folder (default: the demo's)")
    parser.add_argument("--embedder", help="--serve: CHATRAG_EMBEDDER for seeding and the app")
    parser.add_argument("--logs", default=str(BASE_DIR / ".var"), help="--serve: log folder")
    parser.add_argument("--flood", type=int, default=0, help="frames per type of one user's flood")
    parser.add_argument("--flood-sockets", type=int, default=50, help="--flood: sockets to open")
    parser.add_argument(
        "--worst-case", action="store_true", help="ordinary users beside one worst-case sender"
    )
    parser.add_argument("--worst-rate", type=float, default=20.0, help="worst cases a minute")
    args = parser.parse_args(argv)
    steps = [int(s) for s in args.steps.split(",") if s.strip()]
    if not args.serve and not args.url:
        parser.error("give --url of a running app, or --serve")
    model_ms = MODEL_CALLS_BEFORE_FIRST_DELTA * args.model_latency * 1000

    if args.flood:
        with serve(args) if args.serve else contextlib.nullcontext(args.url) as url:
            flooded = run_flood(url, args.flood, args.flood_sockets)
        print(_flood_table(flooded))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"url": url, **flooded}, indent=1))
        return 0

    if args.worst_case:
        with serve(args) if args.serve else contextlib.nullcontext(args.url) as url:
            worst = run_worst(args, url, steps[0], model_ms)
        print(_worst_table(worst))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"url": url, **worst}, indent=1))
        return 0

    with serve(args) if args.serve else contextlib.nullcontext(args.url) as url:
        cookies = make_sessions(max(steps))
        # One turn first, not counted: the first loads the embedding model and opens pools.
        warm = asyncio.run(run_step(url, cookies, 1, 0.01, 0.0))
        if not warm.completed:
            failures = [t.failure for t in warm.turns] or ["could not connect"]
            raise SystemExit(f"the warm-up turn failed: {failures}")
        rows = []
        load_before = os.getloadavg()
        for users in steps:
            step = asyncio.run(run_step(url, cookies, users, args.duration, args.think))
            row = step.summary(model_ms, args.budget_ms)
            rows.append(row)
            print(_table([row]).splitlines()[-1], flush=True)
            if args.stop_after_miss and not row["held"]:
                break
        load_after = os.getloadavg()

    held = [r["users"] for r in rows if r["held"]]
    largest = max(held) if held else 0
    print()
    print(_table(rows))
    print(
        f"\nmodel: {args.model_latency * 1000:.0f} ms before the first byte of each call "
        f"({model_ms:.0f} ms before a turn's first delta), {args.model_pieces} pieces "
        f"{args.model_gap * 1000:.0f} ms apart; think {args.think} s; times in ms from sending."
    )
    print(
        f"largest N held (p95 overhead < {args.budget_ms:.0f} ms, no failed turn): {largest}; "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "config": {
                "url": url,
                "steps": steps,
                "duration_s": args.duration,
                "think_s": args.think,
                "model_latency_ms": args.model_latency * 1000,
                "model_ms_before_first_delta": model_ms,
                "model_pieces": args.model_pieces,
                "model_gap_ms": args.model_gap * 1000,
                "budget_ms": args.budget_ms,
            },
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "loadavg_before": load_before,
                "loadavg_after": load_after,
            },
            "steps": rows,
            "largest_n_held": largest,
        }
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
