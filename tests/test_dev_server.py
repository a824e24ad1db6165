"""`make run` stops every child on Ctrl-C and on SIGTERM (issue 38, finding 8).

The attack: Ctrl-C on `make run` left the Celery beat process running, both times (`celery
worker -B` starts beat as a grandchild). Here the dev server's supervisor runs as its own
process with two children, each of which starts a grandchild that ignores SIGINT and SIGTERM
(the worst beat); after the signal, no child or grandchild may be left (read with psutil).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from chatrag.dev.server import BASE_DIR

HANG_GUARD_S = 60  # a hang guard, not a timing

GRANDCHILD = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "while True: time.sleep(1)\n"
)
CHILD = (
    "import os, subprocess, sys, time\n"
    "grandchild = subprocess.Popen([sys.executable, '-c', sys.argv[2]])\n"
    "with open(sys.argv[1], 'a') as pids: pids.write(f'{os.getpid()} {grandchild.pid}\\n')\n"
    "while True: time.sleep(1)\n"
)
SUPERVISOR = (
    "import sys\n"
    "from chatrag.dev.server import supervise\n"
    "child = [sys.executable, '-c', sys.argv[2], sys.argv[1], sys.argv[3]]\n"
    "raise SystemExit(supervise([('worker', child), ('web server', child)], stop_timeout=2))\n"
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for_pids(path: Path, count: int, supervisor: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) == count:
            return [int(pid) for line in lines for pid in line.split()]
        assert supervisor.poll() is None, supervisor.communicate()
        time.sleep(0.1)
    raise AssertionError("the children did not start")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_dev_server_ends_every_child_and_grandchild(
    tmp_path: Path, signum: signal.Signals
) -> None:
    pids_file = tmp_path / "pids"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(pids_file), CHILD, GRANDCHILD],
        cwd=BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pids = _wait_for_pids(pids_file, 2, supervisor)
    try:
        assert len(pids) == 4 and all(_alive(pid) for pid in pids)
        supervisor.send_signal(signum)
        assert supervisor.wait(timeout=HANG_GUARD_S) == 0
        left = [pid for pid in pids if _alive(pid)]
        assert left == [], f"still running after {signum.name}: {left}"
    finally:
        for pid in pids:
            if _alive(pid):
                psutil.Process(pid).kill()
        if supervisor.poll() is None:
            supervisor.kill()
        supervisor.communicate()


def test_a_child_that_exits_ends_the_others_and_their_grandchildren(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(pids_file), CHILD, GRANDCHILD],
        cwd=BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pids = _wait_for_pids(pids_file, 2, supervisor)
    try:
        psutil.Process(pids[0]).kill()  # the worker dies on its own
        assert supervisor.wait(timeout=HANG_GUARD_S) == 1
        assert [pid for pid in pids if _alive(pid)] == []
    finally:
        for pid in pids:
            if _alive(pid):
                psutil.Process(pid).kill()
        if supervisor.poll() is None:
            supervisor.kill()
        supervisor.communicate()
