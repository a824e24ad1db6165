"""The production topology, started as a deployment starts it, without Docker.

What `docker-compose.yml` runs, as processes on this machine: production settings (debug off,
a secret, `DATABASE_URL` to a database of this module's own on the suite's PostgreSQL as if it
were external, `REDIS_URL` to the machine's Redis for the channel layer, the cache and
Celery's broker), the first start (`migrate`, `collectstatic` with hashed names,
`createsuperuser`, `ingest` of a folder), two daphne web processes, two prefork Celery workers
and Celery beat. A browser is played by `httpx` and `websockets` clients. Every step logs
which process served it (TOPOLOGY lines, printed at the end and, in CI, kept under
$CHATRAG_ARTIFACTS/topology/ with each process's own log).

The chat model is the fake Ollama server (`chatrag.dev.fakemodel`), held after its first piece
where a turn must still be running (the stop, the kill).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from chatrag.dev.fakemodel import FakeModelConfig, FakeModelServer
from tests.conftest import DEMO_KB
from tests.support import (
    BASE_DIR,
    WebServer,
    app_env,
    chat_socket,
    database_url,
    eventually,
    login_client,
    manage,
    socket_until,
    web_servers,
)

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.asyncio]

REDIS_URL = os.environ.get("CHATRAG_TEST_REDIS_URL", "")
ADMIN, PASSWORD = "ops", f"pw-{secrets.token_hex(8)}"
DOCUMENTS = ["pt/ferias-regras-gerais", "pt/vale-refeicao-regra-geral"]
# The uploaded document: a rule no demo page has, asked about by words only it holds.
UPLOAD_NAME = "bicicletario.md"
UPLOAD_TITLE = "Bicicletário da sede"
UPLOAD_TEXT = f"""# {UPLOAD_TITLE}

O bicicletário da sede fica no subsolo e abre às seis da manhã. Cada bicicleta precisa de
um cadeado próprio; a portaria empresta cadeados por um dia. Bicicletas esquecidas por mais
de trinta dias são doadas.
"""
UPLOAD_QUESTION = "onde fica o bicicletário e a portaria empresta cadeado?"


def _redis_db(url: str, db: int) -> str:
    """`url` on Redis database `db`: the topology's broker queues apart from other tests'."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


@dataclass
class Topology:
    webs: list[WebServer]
    model: FakeModelServer
    conninfo: str
    logs: Path
    celery: dict[str, int] = field(default_factory=dict)  # name: pid
    database: str = ""
    events: list[str] = field(default_factory=list)

    def log(self, line: str) -> None:
        self.events.append(f"TOPOLOGY {line}")
        print(f"TOPOLOGY {line}", flush=True)

    def name(self, web: WebServer) -> str:
        return f"{web.log.stem} (pid {web.process.pid}, {web.url})"

    def query(self, statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.conninfo) as conn:
            return conn.execute(statement, params or []).fetchall()


def _celery(env: dict[str, str], logs: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    """A Celery process as the compose file starts one (`celery -A chatrag ...`)."""
    command = [sys.executable, "-m", "celery", "-A", "chatrag", *args, "--loglevel", "INFO"]
    command += ["--logfile", str(logs / f"{name}.log")]
    return subprocess.Popen(
        command, cwd=BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    if not REDIS_URL:
        pytest.skip("set CHATRAG_TEST_REDIS_URL to a Redis server to run the topology test")
    import redis
    from django.conf import settings

    tmp = tmp_path_factory.mktemp("topology")
    logs = tmp / "logs"
    logs.mkdir()
    name = f"test_topology_{os.getpid()}"
    admin = dict(settings.DATABASES["default"])
    url = database_url({**admin, "NAME": name})
    admin_url = database_url({**admin, "NAME": "postgres"})
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    redis_url = _redis_db(REDIS_URL, 14)
    redis.Redis.from_url(redis_url).flushdb()
    model = FakeModelServer(FakeModelConfig(latency=0.05, gap=0.05, pieces=20)).start()
    env = app_env(
        database_url=url,
        tmp=tmp,
        model_url=model.url,
        REDIS_URL=redis_url,
        CHATRAG_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        CHATRAG_ALLOWED_HOSTS="127.0.0.1",
        # Plain HTTP here, as behind nginx without TLS: cookies must not be Secure-only.
        CHATRAG_SECURE_COOKIES="0",
        CHATRAG_HSTS_SECONDS="0",
        CHATRAG_CACHE_KEY_PREFIX=f"topology-{uuid.uuid4().hex[:8]}",
        # Beat's sweep, quickened: a turn untouched for 3 s is one no process runs any more.
        CHATRAG_INTERRUPTED_AFTER_SECONDS="3",
        CHATRAG_RECOVER_EVERY_SECONDS="1",
        DJANGO_SUPERUSER_USERNAME=ADMIN,
        DJANGO_SUPERUSER_EMAIL="ops@example.com",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
    )
    kb = tmp / "kb"
    for document in DOCUMENTS:
        (kb / document).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO_KB / f"{document}.md", kb / f"{document}.md")
    celery: list[subprocess.Popen[bytes]] = []
    try:
        # The first start, as docs/deploy.md prints it.
        manage(env, "migrate", "--noinput")
        manage(env, "collectstatic", "--noinput")
        manage(env, "createsuperuser", "--noinput")
        manage(env, "ingest", str(kb), "--quiet")
        for i in range(2):
            celery.append(
                _celery(env, logs, f"worker-{i}", "worker", "--pool", "prefork",
                        "--concurrency", "1", "--hostname", f"worker-{i}@%h")
            )  # fmt: skip
        celery.append(_celery(env, logs, "beat", "beat", "--schedule", str(tmp / "beat-db")))
        with web_servers(env, logs, count=2, name="web") as webs:
            result = Topology(webs=webs, model=model, conninfo=url, logs=logs, database=name)
            result.celery = {f"worker-{i}": process.pid for i, process in enumerate(celery[:2])} | {
                "beat": celery[2].pid
            }
            for web in webs:
                result.log(f"{result.name(web)} answers /healthz")
            yield result
            (logs / "topology.log").write_text("\n".join(result.events) + "\n")
    finally:
        model.release()
        model.stop()
        for process in celery:
            _stop(process)
        for log in sorted(logs.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}")
        artifacts = os.environ.get("CHATRAG_ARTIFACTS")
        if artifacts:
            shutil.copytree(logs, Path(artifacts) / "topology", dirs_exist_ok=True)
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(drop)


async def _ask(socket: Any, text: str, until: str = "done") -> dict[str, Any]:
    await socket.send(json.dumps({"type": "message", "conversation": None, "text": text}))
    frames = await socket_until(socket, until, "error")
    assert frames[-1]["type"] == until, frames[-1]
    accepted = next(f for f in frames if f["type"] == "accepted")
    sources = [f for f in frames if f["type"] == "sources"]
    return {
        "conversation": accepted["conversation"],
        "question": accepted["message_id"],
        "answer": sources[0]["message_id"] if sources else None,
        "sources": sources[0]["sources"] if sources else [],
        "last": frames[-1],
    }


def _rss_mb(pid: int) -> float:
    """A process's resident memory with its children's (a prefork worker's pool), in MB."""
    total = 0.0
    with open(f"/proc/{pid}/status") as status:
        total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for child in children.read_text().split() if children.exists() else []:
        total += _rss_mb(int(child))
    return total


def _figures(topology: Topology) -> None:
    """Log (never assert) memory per process and the database's connections: docs/scale.md."""
    for web in topology.webs:
        topology.log(f"{topology.name(web)} resident memory {_rss_mb(web.process.pid):.0f} MB")
    for name, pid in topology.celery.items():
        topology.log(f"{name} (pid {pid}) resident memory with its pool {_rss_mb(pid):.0f} MB")
    [(count,)] = topology.query(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [topology.database]
    )
    topology.log(f"connections to the database from all processes (and this test): {count}")


def _status(topology: Topology, message_id: int) -> tuple[str, str]:
    rows = topology.query(
        "SELECT status, error FROM conversations_message WHERE id = %s", [message_id]
    )
    return rows[0]


async def test_production_topology_serves_chat_admin_workers_and_static(
    topology: Topology,
) -> None:
    first, second = topology.webs
    clients = [await login_client(web.url, ADMIN, PASSWORD) for web in topology.webs]
    try:
        for web in topology.webs:
            topology.log(f"{topology.name(web)} signed {ADMIN} in (login form, Origin checked)")

        # Static files: hashed names from collectstatic's manifest, served by WhiteNoise.
        page = await clients[0].get("/")
        assert page.status_code == 200
        hashed = re.findall(r"/static/[\w/.-]+\.[0-9a-f]{12}\.(?:js|css)", page.text)
        assert hashed, "the chat page names no hashed static file"
        admin_page = await clients[1].get("/admin/")
        hashed += re.findall(r"/static/admin/css/[\w/.-]+\.[0-9a-f]{12}\.css", admin_page.text)
        assert any(p.startswith("/static/admin/") for p in hashed), admin_page.text[:500]
        for web, client in zip(topology.webs, clients, strict=True):
            for path in hashed:
                response = await client.get(path)
                assert response.status_code == 200 and response.content, path
                assert "immutable" in response.headers.get("cache-control", ""), path
            topology.log(f"{topology.name(web)} served {len(hashed)} hashed static files")
        missing = await clients[0].get("/no-such-page/")
        assert missing.status_code == 404 and "Traceback" not in missing.text  # debug is off

        cookies = [str(c.cookies["sessionid"]) for c in clients]

        # A turn on each web process.
        for web, cookie in zip(topology.webs, cookies, strict=True):
            async with chat_socket(web.url, cookie) as socket:
                turn = await _ask(socket, "quantos dias de férias eu tenho?")
            assert turn["last"]["status"] == "complete", turn["last"]
            assert _status(topology, turn["answer"])[0] == "complete"
            topology.log(f"{topology.name(web)} ran turn {turn['answer']} to complete")

        # A stop pressed on the second web process ends the turn running on the first.
        topology.model.hold()
        try:
            async with (
                chat_socket(first.url, cookies[0]) as asking,
                chat_socket(second.url, cookies[1]) as other,
            ):
                turn = await _ask(asking, "e o vale-refeição?", until="delta")
                await other.send(json.dumps({"type": "stop", "message_id": turn["question"]}))
                done = (await socket_until(asking, "done"))[-1]
                assert (done["message_id"], done["status"]) == (turn["answer"], "stopped")
        finally:
            topology.model.release()
        assert _status(topology, turn["answer"])[0] == "stopped"
        topology.log(
            f"{topology.name(second)} stopped turn {turn['answer']} "
            f"running on {topology.name(first)}"
        )

        # An upload through the admin of the first; a worker ingests it; the second answers.
        form = await clients[0].get("/admin/retrieval/document/add/")
        assert form.status_code == 200, form.text[:500]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        collection = re.search(r'name="collection"[^>]*>\s*<option value="(\d+)"', form.text)
        assert token and collection, form.text[:2000]
        posted = await clients[0].post(
            "/admin/retrieval/document/add/",
            data={"csrfmiddlewaretoken": token[1], "collection": collection[1], "folder": "ops"},
            files=[("uploads", (UPLOAD_NAME, UPLOAD_TEXT.encode(), "text/markdown"))],
        )
        assert posted.status_code == 302, posted.text[:2000]
        topology.log(f"{topology.name(first)} accepted the admin upload of {UPLOAD_NAME}")

        def ingested() -> Any:
            rows = topology.query(
                "SELECT id, status FROM retrieval_ingestionjob ORDER BY created_at DESC LIMIT 1"
            )
            return rows[0] if rows and rows[0][1] in ("done", "failed") else None

        job_id, job_status = await eventually(ingested, "the upload's ingestion job finished")
        report = topology.query("SELECT report FROM retrieval_ingestionjob WHERE id = %s", [job_id])
        assert job_status == "done", report
        workers = [
            log.stem
            for log in sorted(topology.logs.glob("worker-*.log"))
            if re.search(r"Task retrieval\.\S+\[[^\]]+\] succeeded", log.read_text())
        ]
        assert workers, "no worker log shows the ingestion task"
        topology.log(f"{', '.join(workers)} ingested job {job_id} ({UPLOAD_NAME})")
        async with chat_socket(second.url, cookies[1]) as socket:
            turn = await _ask(socket, UPLOAD_QUESTION)
        assert UPLOAD_TITLE in json.dumps(turn["sources"], ensure_ascii=False), turn["sources"]
        topology.log(f"{topology.name(second)} answered from {UPLOAD_TITLE!r}")
        _figures(topology)

        # A web process killed mid-turn: beat's sweep, run by a worker, marks the turn failed.
        topology.model.hold()
        try:
            async with chat_socket(second.url, cookies[1]) as socket:
                turn = await _ask(socket, "quantos dias de férias posso vender?", until="delta")
                os.kill(second.process.pid, signal.SIGKILL)
                second.process.wait(timeout=10)
                topology.log(f"killed {topology.name(second)} while turn {turn['answer']} ran")

                def marked() -> bool:
                    return _status(topology, turn["answer"])[0] == "error"

                await eventually(marked, "the killed process's turn was marked failed")
        finally:
            topology.model.release()
        assert _status(topology, turn["answer"])[1].startswith("interrupted")
        assert _status(topology, turn["question"])[0] != "received"
        sweeps = [
            log.stem
            for log in sorted(topology.logs.glob("worker-*.log"))
            if "recovery: marked" in log.read_text()
        ]
        assert sweeps, "no worker log shows the recovery"
        assert "conversations.recover_interrupted" in (topology.logs / "beat.log").read_text()
        topology.log(f"beat scheduled the sweep; {', '.join(sweeps)} marked turn {turn['answer']}")

        # The survivor still serves: the user sees the failed turn and can go on.
        page = await clients[0].get(f"/c/{turn['conversation']}/")
        assert page.status_code == 200 and 'data-state="error"' in page.text
        topology.log(f"{topology.name(first)} shows turn {turn['answer']} as failed")
    finally:
        for client in clients:
            await client.aclose()
