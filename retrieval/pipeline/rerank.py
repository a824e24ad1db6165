"""A listwise rerank of the fused candidates: its prompt and the reading of the reply (pure).

The model sees the best `candidates` fused passages, numbered from 1, and answers the
numbers in its order (`{"order": [3, 1, 2]}`); `model_stages.rerank_stage` makes the call.

Decisions:
- Numbers, not chunk or document ids: short for a small model, and a number it invents
  names nothing. The candidates come from the search, which reads only what the reader may
  read (the permission is in its SQL), so no other passage can reach the prompt.
- Each passage is one line, cut to `passage_chars`: newlines inside a document cannot forge
  another numbered passage, and the prompt's size is bounded whatever the documents.
- Reading the reply is total: a number shown twice counts once, a number not shown is
  ignored, and the candidates the model left out keep their fused order after the ones it
  ranked; a reply with no number in it keeps the fused order. Every candidate stays: a
  rerank may move a passage, never drop one.
- Only the window moves; below it the fused order stays as it was.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .fusion import MergedHit
from .llm import ChatMessage
from .text import defang_prompt_markup

PROMPT_PATH: Final = Path(__file__).parent / "prompts" / "rerank_system.txt"
# A reply's "[3] > [1] > [2]" (RankGPT's own format), when it is not JSON.
_BRACKETED: Final = re.compile(r"\[\s*(\d{1,4})\s*\]")
_DIGITS: Final = re.compile(r"\s*\[?\s*(\d{1,4})\s*\]?\s*")


@functools.cache
def _system_template() -> str:
    return PROMPT_PATH.read_text(encoding="utf-8").strip()


def _one_line(text: str) -> str:
    return " ".join(defang_prompt_markup(text).split())


def _clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + "…"


def rerank_window(merged: Sequence[MergedHit], candidates: int) -> list[MergedHit]:
    """The fused hits the model is asked to order: the best `candidates` of them."""
    return list(merged[: max(0, candidates)])


def build_rerank_messages(
    *,
    question: str,
    meanings: Sequence[str],
    window: Sequence[MergedHit],
    passage_chars: int,
) -> list[ChatMessage]:
    """The system and user messages asking a model to order `window`.

    `question` is the masked question; `meanings` the rewritten queries (what the question
    means in its conversation), shown when they say something else.
    """
    parts = [f"Question: {_one_line(question)}"]
    asked = " ".join(question.split()).casefold()
    shown = [m for m in dict.fromkeys(_one_line(m) for m in meanings) if m.casefold() != asked]
    if shown:
        parts.append("In the conversation it means: " + " | ".join(shown[:3]))
    lines = []
    for number, item in enumerate(window, start=1):
        hit = item.hit
        where = _one_line(hit.title) + (f" — {_one_line(hit.heading)}" if hit.heading else "")
        lines.append(f"[{number}] {where}: {_clip(_one_line(hit.text), passage_chars)}")
    parts.append("Passages:\n" + "\n".join(lines))
    parts.append("Output:")
    return [
        ChatMessage(role="system", content=_system_template()),
        ChatMessage(role="user", content="\n\n".join(parts)),
    ]


def rerank_schema(count: int) -> dict[str, Any]:
    """The reply's JSON schema: passage numbers from 1 to `count`, at most `count` of them."""
    return {
        "type": "object",
        "properties": {
            "order": {
                "type": "array",
                "items": {"type": "integer", "minimum": 1, "maximum": max(1, count)},
                "maxItems": max(1, count),
            }
        },
        "required": ["order"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class RerankReading:
    """What a reply said: the window's new order (0-based, every candidate once)."""

    order: tuple[int, ...]
    ranked: int  # how many candidates the model placed itself
    notes: tuple[str, ...] = ()

    @property
    def moved(self) -> bool:
        return self.order != tuple(range(len(self.order)))


def _numbers(raw: str) -> list[object] | None:
    """The reply's items: a JSON {"order": [...]} or list, else its "[n]" marks; None: none."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict):
        data = data.get("order")
    if isinstance(data, list):
        return list(data)
    found = _BRACKETED.findall(raw)
    return list(found) if found else None


def _number(item: object) -> int | None:
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item
    if isinstance(item, float) and item.is_integer():
        return int(item)
    if isinstance(item, str):
        match = _DIGITS.fullmatch(item)
        if match:
            return int(match.group(1))
    return None


def parse_rerank_output(raw: str, count: int) -> RerankReading:
    """Read a reply ordering `count` candidates; never raises (see the module's decisions)."""
    fused = tuple(range(count))
    items = _numbers(raw)
    if items is None:
        return RerankReading(fused, 0, ("no passage numbers in the reply: fused order kept",))
    order: list[int] = []
    unknown: list[str] = []
    repeated = 0
    for item in items:
        number = _number(item)
        if number is None or not 1 <= number <= count:
            unknown.append(_clip(json.dumps(item, ensure_ascii=False), 12))
            continue
        if number - 1 in order:
            repeated += 1
            continue
        order.append(number - 1)
    notes = []
    if unknown:
        notes.append(f"ignored {len(unknown)} unknown: {', '.join(unknown[:5])}")
    if repeated:
        notes.append(f"ignored {repeated} repeated")
    ranked = len(order)
    missing = [i for i in fused if i not in order]
    if not order:
        notes.append("no candidate ranked: fused order kept")
    elif missing:
        notes.append(f"{len(missing)} not ranked by the model: kept in fused order after")
    return RerankReading((*order, *missing), ranked, tuple(notes))


def apply_rerank(merged: Sequence[MergedHit], order: Sequence[int]) -> list[MergedHit]:
    """`merged` with its first `len(order)` hits in `order`, the rest as they were."""
    size = len(order)
    if sorted(order) != list(range(size)) or size > len(merged):
        raise ValueError("the order must be a permutation of the window's positions")
    return [merged[i] for i in order] + list(merged[size:])
