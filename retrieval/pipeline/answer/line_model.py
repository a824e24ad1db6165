"""The extractive answer's line scorer: a log-linear model over a line's features (pure).

The weights are data (`line_weights.json` beside this module), fitted on judged answers by
`scripts/fit_line_choice.py` (a conditional logit: each question's candidate lines compete;
cross-validated by conversation) and refitted by running it again. A line's score is exp of
its linear score, so scores compare as ratios. `record_candidates` lets the fitting script
see every candidate line's features as the chat computes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

WEIGHTS_FILE = Path(__file__).with_name("line_weights.json")

# What each feature measures (the fitting script writes these names into the weights file;
# a name the file lacks weighs 0, so a feature can be added before it is fitted).
FEATURES: dict[str, str] = {
    "own_line": "share of the question's own words (by rarity) the line says",
    "own_title": "share of its own words only the line's page title says",
    "own_heading": "share of its own words only the line's section heading says",
    "carried_line": "share of the words carried from the conversation or the glossary it says",
    "carried_title": "share of the carried words only its page title says",
    "carried_heading": "share of the carried words only its section heading says",
    "echo_line": "share of the carried words the last reply already used that it says",
    "said_mass": "log(1 + rarity of the searched words the line says), own words whole",
    "relative_own": "own_line as a share of the best line's own_line in this answer",
    "silent": "the line says none of the searched words, only its title or heading does",
    "kind_stated": "the question asks a kind of answer (amount, duration...) the line states",
    "kind_missing": "the question asks a kind of answer the line does not state",
    "figure": "no kind asked, and the line has a figure, an address or a threshold",
    "figure_topic_only": "the question names only its topic and the line has a figure",
    "meta": "the line talks about the page itself (who approves it, when it was revised)",
    "emphasis": "the line sets words in bold or underline (its page's authors stress them)",
    "page_rank": "its page's place among those found, 0 first, capped at 4",
    "line_order": "its place in its passage, capped at 10, over 10",
    "later_chunk": "its passage is not its document's first",
    "log_words": "log(words)",
    "step": "a numbered step",
    "item": "an item of a list a line introduces",
    "row": "a table row",
    "repeated": "an earlier reply said most of it already",
    "semantic": "the line's best cosine with the searched queries (stored line vectors)",
    "semantic_gap": "how far its semantic is below the best line's in this answer",
}


@dataclass(frozen=True)
class LineModel:
    """Weights per feature name and a bias: score = exp(bias + sum(w * feature)), features
    centred and scaled as when fitted. Scores compare as ratios (a conditional logit: the
    share of a question's candidates' total that a line has is the model's probability that
    it is the line that answers)."""

    weights: Mapping[str, float]
    bias: float
    means: Mapping[str, float]  # features are centred and scaled as when fitted
    scales: Mapping[str, float]
    # Softens the ratios between lines' scores (exp(z / temperature)): the answer keeps the
    # lines within a share of its best one, and the ranking loss alone makes the scores far
    # sharper than that share was set for. Fitted on whole answers (see the fitting script).
    temperature: float = 1.0
    # A line under this share of its page's best line's score is left out of the answer.
    keep: float = 0.5
    # Another page takes the answer from the search's first when its best lines score this
    # many times as much (a page's fit: the mean of its two best lines).
    switch: float = 1.1

    def contributions(self, features: Mapping[str, float]) -> dict[str, float]:
        """What each feature adds to the line's linear score (its weight times its centred,
        scaled value): the "why" of a line."""
        return {
            name: weight
            * (features.get(name, 0.0) - self.means.get(name, 0.0))
            / (self.scales.get(name, 1.0) or 1.0)
            for name, weight in self.weights.items()
        }

    def score(self, features: Mapping[str, float]) -> float:
        z = self.bias + sum(self.contributions(features).values())
        return math.exp(max(-50.0, min(50.0, z / self.temperature)))


def model_from(data: Mapping[str, Any]) -> LineModel:
    """A model from the weights file's JSON object."""
    return LineModel(
        weights={k: float(v) for k, v in data["weights"].items()},
        bias=float(data["bias"]),
        means={k: float(v) for k, v in data.get("means", {}).items()},
        scales={k: float(v) for k, v in data.get("scales", {}).items()},
        temperature=float(data.get("temperature", 1.0)),
        keep=float(data.get("keep", 0.5)),
        switch=float(data.get("switch", 1.1)),
    )


@lru_cache(maxsize=1)
def _shipped() -> LineModel:
    return model_from(json.loads(WEIGHTS_FILE.read_text(encoding="utf-8")))


_MODEL: ContextVar[LineModel | None] = ContextVar("line_model", default=None)


def line_model() -> LineModel:
    """The model in use: the shipped one (`line_weights.json`), or `using_line_model`'s."""
    return _MODEL.get() or _shipped()


@contextmanager
def using_line_model(model: LineModel) -> Iterator[None]:
    """Within the block, lines are scored with `model` (the fitting script tries weights
    on whole answers without writing them)."""
    token = _MODEL.set(model)
    try:
        yield
    finally:
        _MODEL.reset(token)


Candidate = dict[str, Any]  # one candidate line: its text, features, score, page and place
_RECORDER: ContextVar[Callable[[Sequence[Candidate]], None] | None] = ContextVar(
    "line_candidates", default=None
)


@contextmanager
def record_candidates(sink: Callable[[Sequence[Candidate]], None]) -> Iterator[None]:
    """Within the block, every line choice sends its candidate lines to `sink` (the fitting
    script's view; threads started by `asyncio.to_thread` inherit it)."""
    token = _RECORDER.set(sink)
    try:
        yield
    finally:
        _RECORDER.reset(token)


def recorder() -> Callable[[Sequence[Candidate]], None] | None:
    return _RECORDER.get()
