"""`make run`: database, migrations, demo data, worker and web server; Ctrl-C stops them all.

Started as `python -m chatrag.dev.server`. Nothing here runs in production, where each
process is started by its own supervisor (see docker-compose.yml). With CHATRAG_LOCAL_MODEL=1
(`make run-local`) it also runs the local model server (`chatrag.dev.localmodel`) in this
process and points the worker's and the web server's chat model settings at it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from chatrag.env import env_bool, env_file, env_int, load_env_file

BASE_DIR = Path(__file__).resolve().parents[2]


def _manage(*args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, check=True)


# --- helpers shared with the load script and the tests that run the app as a real server --------


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def daphne_command(host: str, port: int | str) -> list[str]:
    """The web server, as every process of ours starts it. Verbosity 0: daphne keeps no
    access log of its own (it would print each URL with its query string); warnings and
    errors still print, and the app logs each request (`middleware.AccessLogMiddleware`)."""
    command = [sys.executable, "-m", "daphne", "-v", "0", "-b", host, "-p", str(port)]
    return [*command, "chatrag.asgi:application"]


def start_web(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start daphne on 127.0.0.1:`port` with `env`, its output going to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            daphne_command("127.0.0.1", port),
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 90) -> None:
    """Wait until `url`/healthz answers 200; raise if the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the web server exited early ({process.returncode})")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the web server did not answer {url}/healthz in {timeout:.0f}s")


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """Terminate a child, killing it if it does not stop in time."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def start_child(command: list[str]) -> subprocess.Popen[bytes]:
    """Start a child in a process group of its own, which `stop_children` ends whole.

    Issue 38, finding 8: `celery worker -B` starts beat as a grandchild, which outlived
    Ctrl-C every time. In its own session a child and whatever it starts share one group;
    the terminal's Ctrl-C reaches this process only, and this process ends each group.
    """
    return subprocess.Popen(command, cwd=BASE_DIR, start_new_session=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal: not ours to wait for
        return False
    return True


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_children(children: list[subprocess.Popen[bytes]], timeout: float = 10) -> None:
    """SIGTERM every child's process group, then SIGKILL what is left of it after `timeout`.

    Each group is ended even when its leader has exited already: a grandchild (beat) may
    still be running in it.
    """
    for child in children:
        _signal_group(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        while _group_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_group(child.pid, signal.SIGKILL)
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def supervise(commands: list[tuple[str, list[str]]], *, stop_timeout: float = 10) -> int:
    """Run these children until SIGINT or SIGTERM (0) or one of them exits (1); end them all.

    Whatever happens, every child's process group is ended before this returns.
    """
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for _, command in commands:
            children.append(start_child(command))
        while not stopping and all(child.poll() is None for child in children):
            time.sleep(0.2)
        if stopping:
            print("\nstopping...")
            return 0
        name, dead = next(
            (n, c) for (n, _), c in zip(commands, children, strict=True) if c.poll() is not None
        )
        print(f"\nthe {name} exited ({dead.returncode}); stopping")
        return 1
    finally:
        stop_children(children, timeout=stop_timeout)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_local_model(stack: ExitStack) -> None:
    """Serve the local model in this process; the children inherit settings pointing at it."""
    from . import localmodel

    try:
        model = stack.enter_context(localmodel.serve())
    except localmodel.LocalModelUnavailable as exc:
        raise SystemExit(f"CHATRAG_LOCAL_MODEL is set, but {exc}") from exc
    os.environ.update(model.environment(os.environ))
    print(f"local model server (SmolLM2-135M-Instruct, llama.cpp) on {model.url}")


def worker_command(*, processes: int, beat_schedule: Path | None) -> list[str]:
    """The dev server's Celery worker: `processes` prefork children, and beat when given its
    schedule file (production runs its own beat).

    Two processes by default: with one (it was `--pool solo`), an upload whose file took long
    held every other upload's job behind it (issue 38). Each takes one task at a time
    (prefetch 1, acks late), so a second upload's job goes to the free process.
    """
    worker = [sys.executable, "-m", "celery", "-A", "chatrag", "worker", "--loglevel", "WARNING"]
    worker += ["--pool", "prefork", "--concurrency", str(processes)]
    if beat_schedule is not None:
        worker += ["-B", "--schedule", str(beat_schedule)]
    return worker


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # The variables read here may come from `.env` too (the environment wins, as in settings).
    load_env_file(env_file())
    host = os.environ.get("CHATRAG_HOST", "127.0.0.1")
    port = os.environ.get("CHATRAG_PORT", "8000")
    started_db = False
    if not os.environ.get("DATABASE_URL"):
        from chatrag.dev import db as devdb

        started_db = devdb._running_info() is None
        devdb.ensure_running()
    local_model = ExitStack()
    try:
        if env_bool("CHATRAG_LOCAL_MODEL"):
            _start_local_model(local_model)
        _manage("migrate", "--verbosity", "0")
        _manage("seed_demo")
        _manage("collectstatic", "--noinput", "--verbosity", "0")
        # Turns the last run left "in progress" (it was killed mid-answer) are failed now:
        # the web server started below is the only one.
        _manage("recover_interrupted", "--all")
        var_dir = Path(os.environ.get("CHATRAG_VAR_DIR", BASE_DIR / ".var"))
        var_dir.mkdir(parents=True, exist_ok=True)
        worker = worker_command(
            processes=env_int("CHATRAG_DEV_WORKER_PROCESSES", 2, minimum=1),
            beat_schedule=var_dir / "celerybeat-schedule",
        )
        print(f"\nchatrag is running on http://{host}:{port}/  (Ctrl-C stops everything)\n")
        return supervise([("worker", worker), ("web server", daphne_command(host, port))])
    except KeyboardInterrupt:  # before the children started
        print("\nstopping...")
        return 0
    finally:
        local_model.close()
        if started_db:
            from chatrag.dev import db as devdb

            devdb.stop()
            print("embedded PostgreSQL stopped")


if __name__ == "__main__":
    raise SystemExit(main())
