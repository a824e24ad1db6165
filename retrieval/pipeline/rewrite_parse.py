"""Parse a chat model's rewrite output into typed queries, repairing what small models break.

Pure: no I/O. Every failure is a RewriteParseError whose `reason` says what was wrong, so the
caller can record it and fall back to the rule-based rewriter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

import json_repair

from retrieval.pipeline.text import normalize
from retrieval.pipeline.types import Clarification, QueryType, SearchQuery

LLM_QUERY_TYPES: Final[tuple[QueryType, ...]] = (
    "normalize",
    "expand",
    "decompose",
    "multi_query",
    "hyde",
)

# Every property is required and nullable instead of optional, so that OpenAI's strict mode
# accepts the schema; the parser still tolerates a missing `area` or `clarification`.
REWRITE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "queries": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "type": {"type": "string", "enum": list(LLM_QUERY_TYPES)},
                    "area": {"type": ["string", "null"]},
                },
                "required": ["text", "type", "area"],
                "additionalProperties": False,
            },
        },
        "needs_clarification": {"type": "boolean"},
        "clarification": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "question": {"type": "string"},
                        "options": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["question", "options"],
                    "additionalProperties": False,
                },
                {"type": "null"},
            ]
        },
    },
    "required": ["queries", "needs_clarification", "clarification"],
    "additionalProperties": False,
}


def rewrite_schema(max_queries: int) -> dict[str, Any]:
    """REWRITE_SCHEMA with at most `max_queries` queries: the schema sent to the model.

    A small model held to an unbounded array may add queries until its token limit and never
    close the JSON (SmolLM2-135M on llama.cpp did, on every rewrite); the bound lets the
    constrained decoder close it. OpenAI's strict mode, llama.cpp, Ollama and vLLM accept
    `maxItems`.
    """
    queries = {**REWRITE_SCHEMA["properties"]["queries"], "maxItems": max_queries}
    return {**REWRITE_SCHEMA, "properties": {**REWRITE_SCHEMA["properties"], "queries": queries}}


MAX_CLARIFICATION_OPTIONS: Final = 6
# An area is a short label ("RH", "Financeiro"); anything longer is cut, like every other field,
# so no model output, however long, goes on unbounded into traces, pages or searches.
MAX_AREA_CHARS: Final = 60
# Candidate JSON starts tried before giving up; bounds the work on long, JSON-free output.
_MAX_CANDIDATES: Final = 12

_THINK_RE = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_CLOSERS: Final = {"{": "}", "[": "]"}
_REPLY_KEYS: Final = frozenset({"queries", "query", "needs_clarification"})


class RewriteParseError(ValueError):
    """The model's output holds nothing usable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ParsedRewrite:
    """The validated content of a rewrite reply."""

    queries: list[SearchQuery]
    needs_clarification: bool = False
    clarification: Clarification | None = None


def fold(text: str) -> str:
    """Return `text` case-folded, without accents, whitespace collapsed (for comparing)."""
    return " ".join(normalize(text).split())


def _scan_balanced(text: str, start: int) -> int | None:
    """Return the end (exclusive) of the bracketed value opening at `start`, or None.

    Strings in double or single quotes are skipped, so brackets inside them do not count.
    """
    stack: list[str] = []
    quote: str | None = None
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            # An apostrophe inside a bare word (e.g. a Python-ish key) is not a quote.
            if c == "'" and i > 0 and text[i - 1].isalnum():
                pass
            else:
                quote = c
        elif c in _CLOSERS:
            stack.append(_CLOSERS[c])
        elif c in "}]":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return i + 1
        i += 1
    return None


def _loads(segment: str) -> object:
    """Parse `segment` as JSON, then as repaired near-JSON; raise ValueError if neither works."""
    try:
        return json.loads(segment, strict=False)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    except ValueError:
        pass
    # Near-JSON as small models write it (single quotes, Python literals, unquoted keys,
    # trailing commas, raw newlines in strings): json-repair mends it.
    try:
        value = json_repair.loads(segment, skip_json_loads=True)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
    except Exception as exc:  # the mender's own slips (an IndexError on some inputs): unmended
        raise ValueError(f"unrepairable: {exc.__class__.__name__}") from exc
    # Mended text counts only as a reply: json-repair makes an object of any prose in braces.
    if isinstance(value, list) or (isinstance(value, dict) and _REPLY_KEYS & value.keys()):
        return value
    raise ValueError("not a reply, even repaired")


def _extract_json(raw: str) -> dict[str, Any] | list[Any]:
    """Return the first balanced JSON object (or list) found in `raw`."""
    text = _THINK_RE.sub("", raw)
    saw_open = False
    # An object with a reply key wins; otherwise the first object or list of queries.
    first_usable: dict[str, Any] | list[Any] | None = None
    tried = 0
    pos = 0
    while tried < _MAX_CANDIDATES:
        starts = [p for p in (text.find("{", pos), text.find("[", pos)) if p != -1]
        if not starts:
            break
        start = min(starts)
        saw_open = True
        tried += 1
        end = _scan_balanced(text, start)
        if end is not None:
            try:
                value = _loads(text[start:end])
            except ValueError:
                value = None
            if isinstance(value, dict) and _REPLY_KEYS & value.keys():
                return value
            if first_usable is None and (
                isinstance(value, dict)
                or (isinstance(value, list) and any(isinstance(v, str | dict) for v in value))
            ):
                first_usable = value
        pos = start + 1
    if first_usable is not None:
        return first_usable
    if saw_open:
        raise RewriteParseError("no valid JSON object (unbalanced or malformed)")
    raise RewriteParseError("no JSON object")


def _truncate(text: str, max_chars: int) -> str:
    """Cut `text` to at most `max_chars`, at a word boundary when there is one."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    if not text[max_chars].isspace():
        head = cut.rsplit(" ", 1)[0]
        if head and head != cut:
            cut = head
    return cut.rstrip(" ,;:-")


def _as_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() in {"true", "yes", "1", "sim", "si"}
    if isinstance(value, int | float):
        return value != 0
    return False


def _clean_text(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    return " ".join(value.split()).strip("\"'` ")


def _parse_clarification(value: object, max_chars: int) -> Clarification | None:
    if isinstance(value, str):
        value = {"question": value}
    if not isinstance(value, dict):
        return None
    question = _clean_text(value.get("question"))
    if question:
        question = _truncate(question, max_chars)
    if not question:
        return None
    options: list[str] = []
    seen: set[str] = set()
    raw_options = value.get("options")
    if isinstance(raw_options, list):
        for item in raw_options:
            option = _clean_text(item)
            if option:
                option = _truncate(option, max_chars)
            if option and fold(option) not in seen:
                seen.add(fold(option))
                options.append(option)
    return Clarification(question=question, options=tuple(options[:MAX_CLARIFICATION_OPTIONS]))


def parse_rewrite_output(raw: str, *, max_queries: int, max_query_chars: int) -> ParsedRewrite:
    """Parse a rewrite reply defensively; raise RewriteParseError when nothing usable remains."""
    if max_queries < 1 or max_query_chars < 1:
        raise ValueError("max_queries and max_query_chars must be at least 1")
    if not raw or not raw.strip():
        raise RewriteParseError("empty output")
    items, clarification = _reply_parts(_extract_json(raw), max_query_chars)
    needs_clarification = clarification is not None
    queries, dropped = _clean_queries(items, max_query_chars)
    if not queries and not needs_clarification:
        if not items:
            raise RewriteParseError("no queries given")
        detail = ", ".join(f"{count} {why}" for why, count in dropped.items())
        raise RewriteParseError(f"no usable queries ({detail})")
    return ParsedRewrite(
        queries=queries[:max_queries],
        needs_clarification=needs_clarification,
        clarification=clarification,
    )


def _reply_parts(
    data: dict[str, Any] | list[Any], max_query_chars: int
) -> tuple[list[Any], Clarification | None]:
    """The reply's query items, and its question back (None: it asks nothing)."""
    if isinstance(data, list):
        return data, None
    raw_queries = data.get("queries", data.get("query"))
    if isinstance(raw_queries, str):
        # A single query given as a plain string is the question made self-contained.
        raw_queries = [{"text": raw_queries, "type": "normalize"}]
    clarification: Clarification | None = None
    needs_clarification = _as_bool(data.get("needs_clarification", False))
    if needs_clarification:
        clarification = _parse_clarification(data.get("clarification"), max_query_chars)
        if clarification is None:
            raise RewriteParseError(
                "needs_clarification is true but no clarification question given"
            )
    if raw_queries is None:
        if not needs_clarification:
            raise RewriteParseError("JSON object has no 'queries'")
        raw_queries = []
    if not isinstance(raw_queries, list):
        raise RewriteParseError(f"'queries' is {type(raw_queries).__name__}, not a list")
    return raw_queries, clarification


def _clean_queries(
    items: list[Any], max_query_chars: int
) -> tuple[list[SearchQuery], dict[str, int]]:
    """The usable queries, each once, and how many items were dropped for which reason."""
    queries: list[SearchQuery] = []
    seen: set[str] = set()
    dropped: dict[str, int] = {}

    def drop(why: str) -> None:
        dropped[why] = dropped.get(why, 0) + 1

    for item in items:
        area: str | None = None
        qtype: QueryType = "multi_query"
        if isinstance(item, str):
            text = _clean_text(item)
        elif isinstance(item, dict):
            text = _clean_text(item.get("text", item.get("query")))
            qtype, area = _item_type(item.get("type")), _item_area(item.get("area"))
        else:
            drop("not a string or object")
            continue
        if text is None:
            drop("text not a string")
            continue
        text = _truncate(text, max_query_chars)
        if not any(ch.isalnum() for ch in text):
            drop("empty")
            continue
        key = fold(text).rstrip("?.!;: ")
        if key in seen:
            drop("duplicate")
            continue
        seen.add(key)
        queries.append(SearchQuery(text=text, type=qtype, area=area))
    return queries, dropped


def _item_type(raw_type: object) -> QueryType:
    """A query object's type as we know it ("normalize" when unknown or missing)."""
    if isinstance(raw_type, str):
        folded_type = raw_type.strip().lower().replace("-", "_").replace(" ", "_")
        for known in LLM_QUERY_TYPES:
            if folded_type == known:
                return known
    return "normalize"


def _item_area(raw_area: object) -> str | None:
    """A query object's area hint, cut short; None for none, "null" or "none"."""
    area = _truncate(_clean_text(raw_area) or "", MAX_AREA_CHARS) or None
    if area is not None and fold(area) in {"null", "none"}:
        return None
    return area
