"""Worst-case messages through a turn's pure steps (issue 38, finding 2).

The attack: a 4,000-character message ("http://" + "a." x 2000) took 67 s to its rewrite
frame and 3,990 copies of one Arabic ligature 22 s, and every other user's turn waited
behind them. Each step must take any message up to the frame limit without an exception;
how long they take is measured by `scripts/load_ws.py --worst-case`, not asserted here.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval.pipeline.answer import Passage
from retrieval.pipeline.answer.extractive import extractive_answer
from retrieval.pipeline.masking import Masker, MaskingConfig
from retrieval.pipeline.retrieve import EMBED_MAX_CHARS, _embed, search_queries
from retrieval.pipeline.types import SearchQuery
from tests.retrieval.pipeline.test_rewrite_rules import rewrite

LIMIT = 4000  # CHATRAG_MAX_MESSAGE_CHARS' default: the longest message a frame may carry
WORST = [
    "http://" + "a." * 1996,
    "\ufdfa" * 3990,  # 18 characters each once in NFKC
    "Ana Maria " * 400,
    "(" * 3999,
    "a" * 4000,
    "1." * 2000,
    "é" * 4000,
    " ".join(["e isso?"] * 500),
    "123.456.789-09 " * 266,
    "R$ 1.000,00 " * 333,
]
PASSAGE = Passage(
    1,
    "Reembolso de despesas de viagem",
    "Prazos",
    "Pedidos aprovados até o dia 20 são pagos junto com o salário do mês.",
    document="reembolso",
)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECE = st.sampled_from([w[:200] for w in WORST]) | st.text(max_size=200)


@st.composite
def messages(draw: st.DrawFn) -> str:
    """A message up to the frame limit: pieces of the worst cases and arbitrary text, repeated."""
    pieces = draw(st.lists(PIECE, min_size=1, max_size=8))
    text = "".join(pieces) * draw(st.integers(min_value=1, max_value=40))
    return text[:LIMIT] or "?"


def _turn_steps(message: str) -> None:
    """Mask, rewrite with the rules, choose the queries and answer extractively."""
    masked = Masker(MaskingConfig(known_names=("Ana Souza",))).mask(message)
    result = rewrite(masked)
    queries = search_queries(result, masked, {"original": 0.5})
    extractive_answer(
        question=masked,
        queries=[q.text for q in queries],
        passages=[PASSAGE],
        language="pt",
        rewrite=result,
    )


def test_the_worst_messages_found_pass_every_pure_step() -> None:
    for message in WORST:
        _turn_steps(message[:LIMIT])


@FUZZ
@given(messages())
def test_any_message_up_to_the_frame_limit_passes_every_pure_step(message: str) -> None:
    _turn_steps(message)


class _Recording:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [[0.0] for _ in texts]


def test_a_query_is_embedded_only_up_to_the_models_window() -> None:
    """The embedder's time grows faster than its text, and one embedder serves every turn:
    the user's own 4,000 characters, searched whole on the full-text leg, are embedded only
    up to what the model reads."""
    message = "http://" + "a." * 1996
    embedder = _Recording()
    vectors = _embed(
        embedder, [SearchQuery(message, "original"), SearchQuery("férias", "normalize")]
    )
    assert len(vectors) == 2
    assert embedder.texts == [message[:EMBED_MAX_CHARS], "férias"]
