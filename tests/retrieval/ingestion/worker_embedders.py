"""Embedders that misbehave inside a real Celery worker's pool process (named by dotted path
in the worker's CHATRAG_EMBEDDER): a job that takes too long, and a process that dies."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence

from chatrag.dev.fakes import HashingEmbedder

HOLD_S = 60.0  # longer than every limit the tests set; a hang guard, never a measurement


class SlowEmbedder(HashingEmbedder):
    """Sleeps in Python: the soft time limit's exception interrupts it."""

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        time.sleep(HOLD_S)
        return super().embed_passages(texts)


class DeafEmbedder(HashingEmbedder):
    """Ignores the soft time limit, as a call stuck in C code does (the signal is blocked)."""

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        time.sleep(HOLD_S)
        return super().embed_passages(texts)


class DyingEmbedder(HashingEmbedder):
    """Kills its own process, as the kernel's out-of-memory killer does."""

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        os.kill(os.getpid(), signal.SIGKILL)
        return super().embed_passages(texts)
