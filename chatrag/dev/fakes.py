"""Deterministic fakes of the backends for dev and test processes, chosen by dotted path.

`CHATRAG_EMBEDDER=chatrag.dev.fakes.HashingEmbedder` embeds in microseconds without a model: the
test servers, the load script's seeding and fast local runs use it. Production code never
imports this module (apps never import `chatrag`, an import-linter contract); it is loaded by
`retrieval.embeddings.get_embedder` like any embedder. The in-process chat fake is
`tests.fakes.FakeChat`; the fake model server is `chatrag.dev.fakemodel`.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from django.conf import settings

from retrieval.embeddings import Vector

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Deterministic bag-of-character-trigrams vectors: a fast fake for tests and benchmarks.

    Texts sharing words get similar vectors, so ranking tests stay meaningful.
    """

    name = "hashing-trigrams"

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim or settings.CHATRAG_EMBEDDING_DIM

    def _one(self, text: str) -> Vector:
        vec = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            padded = f"#{word}#"
            for i in range(max(1, len(padded) - 2)):
                digest = hashlib.blake2b(padded[i : i + 3].encode(), digest_size=4).digest()
                vec[int.from_bytes(digest, "little") % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        return [x / norm for x in vec]

    def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        return [self._one(t) for t in texts]

    def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        return [self._one(t) for t in texts]
