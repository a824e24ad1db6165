"""A hypothetical answer (HyDE) to search with: its prompt and the reading of the reply (pure).

A model writes a short passage that a policy page answering the question might contain; its
vector is searched like a query of type "hyde" (`model_stages.hyde_stage` makes the call).

Decisions:
- The model is given the rewritten question (what it means in its conversation), never a
  document: the passage is the model's guess, so it is searched on the vector leg alone (its
  invented words and figures must not match pages word for word), weighs less than a query
  in the fusion, is labelled a hypothesis in the trace, and is never a source nor a line of
  the answer (the answer's words come from the question and the real queries).
- Reading is strict: a reply without a usable passage is no query at all (the turn searches
  what it would have searched without the stage). A passage that shares no word with the
  question or its rewritten queries is not about it (a small model copies the prompt's
  example) and is dropped the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from .llm import ChatMessage
from .text import content_terms, defang_prompt_markup

PROMPT_PATH: Final = Path(__file__).parent / "prompts" / "hyde_system.txt"
LANGUAGE_NAMES: Final = {"pt": "Portuguese", "es": "Spanish", "en": "English"}
MIN_LETTERS: Final = 12  # fewer letters than this is no passage to search with
MIN_SHARED_WORD: Final = 3  # a shared word this long or longer ties a passage to its question


class HydeParseError(ValueError):
    """The reply holds no usable passage."""


@functools.cache
def _system_template() -> str:
    return PROMPT_PATH.read_text(encoding="utf-8").strip()


def _one_line(text: str) -> str:
    return " ".join(defang_prompt_markup(text).split())


def build_hyde_messages(
    *, question: str, meanings: Sequence[str], language: str | None, max_chars: int
) -> list[ChatMessage]:
    """The messages asking for a hypothetical passage answering `question` (masked)."""
    system = (
        _system_template()
        .replace("{max_chars}", str(max_chars))
        .replace("{language}", LANGUAGE_NAMES.get(language or "", "the question's own"))
    )
    parts = [f"Question: {_one_line(question)}"]
    asked = " ".join(question.split()).casefold()
    shown = [m for m in dict.fromkeys(_one_line(m) for m in meanings) if m.casefold() != asked]
    if shown:
        parts.append("In the conversation it means: " + " | ".join(shown[:3]))
    parts.append("Output:")
    return [
        ChatMessage(role="system", content=system),
        ChatMessage(role="user", content="\n\n".join(parts)),
    ]


def hyde_schema(max_chars: int) -> dict[str, Any]:
    """The reply's JSON schema: one passage of at most `max_chars` characters."""
    return {
        "type": "object",
        "properties": {"passage": {"type": "string", "minLength": 1, "maxLength": max_chars}},
        "required": ["passage"],
        "additionalProperties": False,
    }


def parse_hyde_output(raw: str, max_chars: int) -> str:
    """The passage of a reply, on one line and at most `max_chars` characters."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise HydeParseError("the reply is not JSON") from exc
    passage = data.get("passage") if isinstance(data, dict) else None
    if not isinstance(passage, str):
        raise HydeParseError("the reply has no passage string")
    text = " ".join(passage.split())
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS:
        raise HydeParseError("the passage is empty or too short")
    if len(text) > max_chars:
        text = text[:max_chars].rsplit(" ", 1)[0].rstrip(" ,;:") or text[:max_chars]
    return text


def _words(text: str, language: str | None) -> set[str]:
    return {
        w for w in content_terms(text, language) if len(w) >= MIN_SHARED_WORD and not w.isdigit()
    }


def about_the_question(
    passage: str, *, question: str, meanings: Sequence[str], language: str | None
) -> bool:
    """Whether `passage` shares a content word with the question or its rewritten queries."""
    asked = _words(question, language)
    for meaning in meanings:
        asked |= _words(meaning, language)
    return bool(_words(passage, language) & asked)
