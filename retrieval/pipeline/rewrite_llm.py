"""Rewrite a turn's question into search queries with a chat model, falling back to rules.

Decisions:
- The conversation goes into one user message as quoted data, not as real chat turns: a
  model shown real assistant turns tends to continue the chat (answer) instead of rewriting,
  and data in one block is easier to tell apart from instructions.
- Newlines inside history messages and the question are collapsed, so that a message cannot
  forge a "assistant:" line of its own.
- Any failure returns the rule-based result with the reason recorded; a rewrite must never
  fail a turn.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final

from retrieval.pipeline.glossary import find_glossary_hits
from retrieval.pipeline.llm import (
    ChatMessage,
    ChatModel,
    LLMError,
    LLMHTTPError,
    LLMProtocolError,
    LLMTimeout,
)
from retrieval.pipeline.rewrite_parse import (
    RewriteParseError,
    fold,
    parse_rewrite_output,
    rewrite_schema,
)
from retrieval.pipeline.text import defang_prompt_markup, normalize, tokenize
from retrieval.pipeline.types import (
    GlossaryEntry,
    GlossaryHit,
    RewriteInput,
    RewriteResult,
    SearchQuery,
)

logger = logging.getLogger(__name__)

PROMPT_PATH: Final = Path(__file__).parent / "prompts" / "rewrite_system.txt"
# Glossary lines shown to the model: the terms found in the turn first, then others.
MAX_GLOSSARY_LINES: Final = 15
# Longer history messages (typically answers) are cut: the rewrite needs the topic only.
MAX_HISTORY_MESSAGE_CHARS: Final = 600
# Words shorter than this are ignored when checking a query against the conversation.
MIN_ANOMALY_WORD: Final = 3
FALLBACK_NOTE: Final = "fell back to rules"


@functools.cache
def _system_template() -> str:
    return PROMPT_PATH.read_text(encoding="utf-8")


@functools.cache
def prompt_digest() -> str:
    """A short hash of the rewrite prompt and its output schema: a change is a new policy."""
    # The bound on the queries is a setting, like {max_queries} in the prompt text (hashed
    # unfilled): any fixed value stands for it.
    schema = json.dumps(rewrite_schema(0), sort_keys=True)
    return hashlib.sha256((_system_template() + schema).encode("utf-8")).hexdigest()[:12]


def llm_policy(model_name: str) -> str:
    """The LLM rewrite's policy version: which model, with which prompt."""
    return f"llm/{model_name}/prompt-{prompt_digest()}"


def _one_line(text: str) -> str:
    # Untrusted text (question, history, glossary) goes into the prompt on one line, defanged.
    return " ".join(defang_prompt_markup(text).split())


def _clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + "…"


def _glossary_lines(hits: Sequence[GlossaryHit], entries: Sequence[GlossaryEntry]) -> list[str]:
    lines: list[str] = []
    seen: set[str] = set()
    candidates: list[GlossaryHit | GlossaryEntry] = [*hits, *entries]
    for item in candidates:
        key = fold(item.term)
        if key in seen:
            continue
        seen.add(key)
        line = f"- {_one_line(item.term)}: {_one_line(item.expansion)}"
        if item.area:
            line += f" (area: {_one_line(item.area)})"
        lines.append(line)
        if len(lines) >= MAX_GLOSSARY_LINES:
            break
    return lines


def build_rewrite_messages(
    inp: RewriteInput, glossary_hits: Sequence[GlossaryHit]
) -> list[ChatMessage]:
    """Build the system and user messages asking a model to rewrite `inp.question`."""
    system = (
        _system_template()
        .replace("{max_queries}", str(inp.max_queries))
        .replace("{today}", inp.today.isoformat() if inp.today else "unknown")
        .strip()
    )
    parts: list[str] = []
    glossary = _glossary_lines(glossary_hits, inp.glossary)
    parts.append("Glossary:\n" + ("\n".join(glossary) if glossary else "(none)"))
    if inp.history:
        window = "\n".join(
            f"{m.role}: {_clip(_one_line(m.text), MAX_HISTORY_MESSAGE_CHARS)}" for m in inp.history
        )
        parts.append("Conversation:\n" + window)
    else:
        parts.append("Conversation: (none, this is the first message)")
    if inp.language:
        parts.append(f"Language of the question: {inp.language}")
    parts.append(f"Latest question: {_one_line(inp.question)}")
    parts.append("Output:")
    return [
        ChatMessage(role="system", content=system),
        ChatMessage(role="user", content="\n\n".join(parts)),
    ]


def collect_glossary_hits(inp: RewriteInput) -> list[GlossaryHit]:
    """Find glossary terms in the question, then those only found in the history."""
    hits: list[GlossaryHit] = list(find_glossary_hits(inp.question, inp.glossary, "question"))
    if inp.history:
        in_question = {fold(h.term) for h in hits}
        history_text = "\n".join(m.text for m in inp.history)
        for hit in find_glossary_hits(history_text, inp.glossary, "history"):
            if fold(hit.term) not in in_question:
                in_question.add(fold(hit.term))
                hits.append(hit)
    return hits


def _content_words(text: str) -> set[str]:
    return {w for w in (normalize(t) for t in tokenize(text)) if len(w) >= MIN_ANOMALY_WORD}


def find_anomalies(
    queries: Sequence[SearchQuery],
    inp: RewriteInput,
    glossary_hits: Iterable[GlossaryHit] = (),
) -> list[str]:
    """List queries that share no content word with the question, window or glossary.

    Such a query did not come from the conversation: a hallucination, or the model obeying
    instructions hidden in a document or message.
    """
    known: set[str] = _content_words(inp.question)
    for message in inp.history:
        known |= _content_words(message.text)
    shown: list[GlossaryHit | GlossaryEntry] = [*glossary_hits, *inp.glossary]
    for item in shown:
        known |= _content_words(f"{item.term} {item.expansion}")
    anomalies: list[str] = []
    for number, query in enumerate(queries, start=1):
        words = _content_words(query.text)
        if words and not words & known:
            anomalies.append(
                f"query {number} shares no term with the conversation: {_clip(query.text, 80)!r}"
            )
    return anomalies


async def rewrite_with_llm(
    inp: RewriteInput,
    model: ChatModel,
    *,
    timeout: float,  # noqa: ASYNC109 - forwarded to the backend and enforced as a deadline
    fallback: Callable[[], RewriteResult],
) -> RewriteResult:
    """Rewrite `inp` with `model`; on any failure return `fallback()` with the reason."""
    hits = collect_glossary_hits(inp)
    messages = build_rewrite_messages(inp, hits)
    try:
        async with asyncio.timeout(timeout):
            schema = rewrite_schema(inp.max_queries)
            raw = await model.complete_json(messages, schema, timeout=timeout)
        parsed = parse_rewrite_output(
            raw, max_queries=inp.max_queries, max_query_chars=inp.max_query_chars
        )
    except (LLMTimeout, TimeoutError):
        reason = f"llm timeout after {timeout:.1f}s"
    except LLMHTTPError as exc:
        reason = f"llm http {exc.status}"
    except LLMProtocolError as exc:
        reason = f"llm protocol error: {exc}"
    except LLMError as exc:
        reason = f"llm error: {exc}"
    except RewriteParseError as exc:
        reason = f"llm output invalid: {exc.reason}"
    except Exception as exc:
        # A bug in a backend must not fail the turn; the rules still give an answer.
        logger.exception("rewrite with %s failed unexpectedly", model.name)
        reason = f"llm failed: {type(exc).__name__}"
    else:
        return RewriteResult(
            queries=parsed.queries,
            backend="llm",
            needs_clarification=parsed.needs_clarification,
            clarification=parsed.clarification,
            glossary_hits=hits,
            model=model.name,
            anomalies=find_anomalies(parsed.queries, inp, hits),
            policy=llm_policy(model.name),
        )
    logger.warning("rewrite with %s failed (%s); falling back to rules", model.name, reason)
    return fallback().with_rule("llm_fallback", FALLBACK_NOTE, error=reason)
