"""Answer building (pure): the grounded prompt, citation clean-up, the extractive fallback.

The answer replies to the user's ORIGINAL words; passages are numbered [1]..[n] like the
source cards, and a citation pointing at no passage is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from .llm import ChatMessage
from .text import content_terms, defang_prompt_markup, detect_language, normalize
from .types import HistoryMessage

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
_CITATION = re.compile(r"\[(\d{1,3})\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-ZÀ-ÖØ-Þ0-9¿¡\"“(])")


@dataclass(frozen=True)
class Passage:
    """A numbered passage given to the answer step."""

    number: int
    title: str
    heading: str
    text: str


LABELS: dict[str, dict[str, str]] = {
    "pt": {
        "extractive": "Resposta extrativa (sem modelo de linguagem): os trechos mais relevantes "
        "dos documentos.",
        "nothing": "Não encontrei nada sobre isso na base de conhecimento que você pode "
        "consultar. Tente reformular a pergunta ou fale com o RH.",
    },
    "es": {
        "extractive": "Respuesta extractiva (sin modelo de lenguaje): los fragmentos más "
        "relevantes de los documentos.",
        "nothing": "No encontré nada sobre esto en la base de conocimiento que puedes "
        "consultar. Intenta reformular la pregunta o habla con RR. HH.",
    },
    "en": {
        "extractive": "Extractive answer (no language model): the most relevant passages "
        "from the documents.",
        "nothing": "I found nothing about this in the knowledge base you can read. Try "
        "rephrasing the question or contact HR.",
    },
}


def answer_language(question: str, fallback: str = "pt") -> str:
    """The language to answer in: the question's own, else the fallback."""
    return detect_language(question) or fallback


def label(key: str, language: str) -> str:
    return LABELS.get(language, LABELS["pt"])[key]


def build_answer_messages(
    *,
    question: str,
    passages: Sequence[Passage],
    history: Sequence[HistoryMessage],
    today: date,
    language: str,
) -> list[ChatMessage]:
    """The grounded prompt: instructions, recent conversation for tone, passages, question.

    Passages, history and question are untrusted: chat-template tokens and the fence tags in
    them are defanged, so a document or a user cannot close a fence or open a system turn.
    """
    system = (PROMPT_DIR / "answer_system.txt").read_text(encoding="utf-8")
    system = system.replace("{today}", today.isoformat()).replace("{language}", language)
    safe = defang_prompt_markup
    blocks = [
        f"[{p.number}] {safe(p.title)}"
        + (f" — {safe(p.heading)}" if p.heading else "")
        + f"\n{safe(p.text)}"
        for p in passages
    ]
    context = "\n\n".join(blocks) if blocks else "(no passages)"
    messages = [ChatMessage("system", system)]
    for item in history[-4:]:
        messages.append(ChatMessage(item.role, safe(item.text[:1500])))
    messages.append(
        ChatMessage(
            "user",
            "<passages>\n"
            + context
            + "\n</passages>\n\n<question>\n"
            + safe(question)
            + "\n</question>",
        )
    )
    return messages


def clean_citations(text: str, passage_count: int) -> tuple[str, list[int]]:
    """Drop citations that point at no passage; return the text and the numbers cited."""
    cited: list[int] = []

    def keep(match: re.Match[str]) -> str:
        number = int(match.group(1))
        if 1 <= number <= passage_count:
            if number not in cited:
                cited.append(number)
            return match.group(0)
        return ""

    cleaned = _CITATION.sub(keep, text)
    cleaned = re.sub(r"[ \t]+([.,;:!?])", r"\1", cleaned)
    return re.sub(r"[ \t]{2,}", " ", cleaned), cited


def _sentences(text: str) -> list[str]:
    flat = re.sub(r"\s*\n\s*[-*•]\s*", ". ", text)
    flat = re.sub(r"\s+", " ", flat).strip()
    return [s.strip() for s in _SENTENCE.split(flat) if len(s.strip()) > 20]


def extractive_answer(
    *, question: str, queries: Sequence[str], passages: Sequence[Passage], language: str
) -> str:
    """Pick the sentences of the top passages that share most words with the question.

    Used without a model server: it never invents anything, and says so.
    """
    if not passages:
        return label("nothing", language)
    terms = set(content_terms(question))
    for query in queries:
        terms.update(content_terms(query))
    scored: list[tuple[float, int, int, str]] = []
    for rank, passage in enumerate(passages[:4]):
        for order, sentence in enumerate(_sentences(passage.text)):
            words = set(normalize(w) for w in re.findall(r"\w+", sentence))
            overlap = len(terms & words)
            if overlap == 0:
                continue
            # Earlier passages rank higher; long sentences are not favoured just for length.
            score = overlap / (1 + 0.15 * rank) - 0.002 * max(0, len(sentence) - 250)
            scored.append((score, passage.number, order, sentence))
    if not scored:
        best = passages[0]
        first = _sentences(best.text)[:2] or [best.text[:300]]
        scored = [(1.0, best.number, i, s) for i, s in enumerate(first)]
    chosen: list[tuple[float, int, int, str]] = []
    per_passage: dict[int, int] = {}
    for item in sorted(scored, key=lambda s: -s[0]):
        if per_passage.get(item[1], 0) >= 2:
            continue
        per_passage[item[1]] = per_passage.get(item[1], 0) + 1
        chosen.append(item)
        if len(chosen) >= 4:
            break
    chosen.sort(key=lambda s: (s[1], s[2]))
    lines = [f"- {sentence} [{number}]" for _, number, _, sentence in chosen]
    return label("extractive", language) + "\n\n" + "\n".join(lines)
