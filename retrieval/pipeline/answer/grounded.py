"""Grounded answers (pure): the model's prompt, citation clean-up, the page's fixed texts.

The answer replies to the user's ORIGINAL words; passages are numbered [1]..[n] like the
source cards, and a citation pointing at no passage is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property
from pathlib import Path

from ..fusion import MergedHit
from ..llm import ChatMessage
from ..text import defang_prompt_markup, detect_language
from ..types import HistoryMessage, LineVector, SearchQuery

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"
_CITATION = re.compile(r"\[(\d{1,3})\]")
# Per chunk id, its lines' vectors (`Searcher.line_vectors`).
LineVectors = Mapping[int, tuple[LineVector, ...]]


@dataclass(frozen=True)
class Passage:
    """A numbered passage given to the answer step."""

    number: int
    title: str
    heading: str
    text: str
    document: str = ""  # the document's id: passages of one document answer together
    position: int = 0  # the chunk's place in its document
    language: str = ""  # the document's language code, "" when not known
    # The chunk's stored line vectors (`extractive.line_texts` of it, each with its unit
    # vector), fetched by the search layer for the found chunks; empty when it has none.
    # Not compared or hashed: two passages are the same text whatever vectors they carry.
    line_vectors: tuple[LineVector, ...] = field(default=(), compare=False, repr=False)

    @cached_property
    def line_index(self) -> dict[str, int]:
        """Each stored line's place in `line_vectors`, by its text."""
        return {text: i for i, (text, _) in enumerate(self.line_vectors)}


LABELS: dict[str, dict[str, str]] = {
    "pt": {
        "model_rejected": "A resposta do modelo não citava os documentos, se repetia ou "
        "estava em outro idioma; mostrando uma resposta extrativa.",
        "not_found": "Os documentos que encontrei não dizem isso. Os mais próximos:",
        "model_cut": "A resposta do modelo foi interrompida; o texto acima pode estar incompleto.",
        "model_failed": "O modelo de linguagem não respondeu; mostrando uma resposta extrativa.",
        "failure": "Não foi possível responder agora. Sua mensagem foi guardada; tente de novo.",
        "extractive": "Resposta extrativa (sem modelo de linguagem): os trechos mais relevantes "
        "dos documentos.",
        "nothing": "Não encontrei nada sobre isso na base de conhecimento que você pode "
        "consultar. Tente reformular a pergunta ou fale com o RH.",
    },
    "es": {
        "model_rejected": "La respuesta del modelo no citaba los documentos, se repetía o "
        "estaba en otro idioma; se muestra una respuesta extractiva.",
        "not_found": "Los documentos que encontré no dicen eso. Los más cercanos:",
        "model_cut": "La respuesta del modelo se interrumpió; el texto de arriba puede estar "
        "incompleto.",
        "model_failed": "El modelo de lenguaje no respondió; se muestra una respuesta extractiva.",
        "failure": "No fue posible responder ahora. Tu mensaje quedó guardado; inténtalo de nuevo.",
        "extractive": "Respuesta extractiva (sin modelo de lenguaje): los fragmentos más "
        "relevantes de los documentos.",
        "nothing": "No encontré nada sobre esto en la base de conocimiento que puedes "
        "consultar. Intenta reformular la pregunta o habla con RR. HH.",
    },
    "en": {
        "model_rejected": "The model's answer cited no document, repeated itself or was in "
        "another language; showing an extractive answer.",
        "not_found": "The pages I found don't say that. The closest ones:",
        "model_cut": "The model's answer was cut off; the text above may be incomplete.",
        "model_failed": "The language model did not answer; showing an extractive answer.",
        "failure": "Could not answer right now. Your message is saved; please try again shortly.",
        "extractive": "Extractive answer (no language model): the most relevant passages "
        "from the documents.",
        "nothing": "I found nothing about this in the knowledge base you can read. Try "
        "rephrasing the question or contact HR.",
    },
}


def passages_from_hits(
    hits: Sequence[MergedHit], line_vectors: LineVectors | None = None
) -> list[Passage]:
    """Number the passages shown to the user, [1] first, as the source cards are.

    `line_vectors` (per chunk id) gives each passage its chunk's stored line vectors."""
    vectors = line_vectors or {}
    return [
        Passage(
            i,
            m.hit.title,
            m.hit.heading,
            m.hit.text,
            str(m.hit.document_id),
            m.hit.position,
            m.hit.language,
            vectors.get(m.hit.chunk_id, ()),
        )
        for i, m in enumerate(hits, start=1)
    ]


def _other_sections(
    shown: Sequence[MergedHit], merged: Sequence[MergedHit], per_document: int
) -> list[MergedHit]:
    """The found chunks of the shown documents that were not shown, best first, until each
    document has `per_document` chunks in all (`context_passages` reads them)."""
    taken: dict[int, int] = {}
    for item in shown:
        taken[item.hit.document_id] = taken.get(item.hit.document_id, 0) + 1
    seen = {item.hit.chunk_id for item in shown}
    out: list[MergedHit] = []
    for item in merged:
        hit = item.hit
        if hit.document_id not in taken or hit.chunk_id in seen:
            continue
        if taken[hit.document_id] >= per_document:
            continue
        seen.add(hit.chunk_id)
        taken[hit.document_id] += 1
        out.append(item)
    return out


def context_chunk_ids(
    shown: Sequence[MergedHit], merged: Sequence[MergedHit], *, per_document: int = 6
) -> list[int]:
    """The chunk ids `context_passages` reads, in its order (whose line vectors to fetch)."""
    others = _other_sections(shown, merged, per_document)
    return [item.hit.chunk_id for item in [*shown, *others]]


def context_passages(
    shown: Sequence[MergedHit],
    merged: Sequence[MergedHit],
    *,
    per_document: int = 6,
    line_vectors: LineVectors | None = None,
) -> list[Passage]:
    """The shown passages, then other found chunks of the same documents (extractive use).

    Search shows at most two chunks of a document; the section that holds the answer may be
    a third. Those chunks carry the number of their document's first card, so a line taken
    from one cites a source the user can open (the document page has every section).
    `line_vectors` (per chunk id) gives each passage its chunk's stored line vectors.
    """
    vectors = line_vectors or {}
    out = passages_from_hits(shown, vectors)
    card: dict[int, int] = {}
    for number, item in enumerate(shown, start=1):
        card.setdefault(item.hit.document_id, number)
    for item in _other_sections(shown, merged, per_document):
        hit = item.hit
        out.append(
            Passage(
                card[hit.document_id],
                hit.title,
                hit.heading,
                hit.text,
                str(hit.document_id),
                hit.position,
                hit.language,
                vectors.get(hit.chunk_id, ()),
            )
        )
    return out


def query_rankings(
    queries: Sequence[SearchQuery], merged: Sequence[MergedHit]
) -> dict[str, list[str]]:
    """Per searched query's text, the documents in that query's own order (best first).

    The fused list mixes every query; a split message's part is best answered by the
    documents its own query found first.
    """
    found: dict[int, list[tuple[int, str]]] = {}
    for item in merged:
        for match in item.matches:
            found.setdefault(match.query, []).append((match.rank, str(item.hit.document_id)))
    out: dict[str, list[str]] = {}
    for index, query in enumerate(queries):
        documents: list[str] = []
        for _, document in sorted(found.get(index, [])):
            if document not in documents:
                documents.append(document)
        out.setdefault(query.text, documents)
    return out


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
    # Runs of spaces inside a line close up; a line's indent (a nested list item) stays.
    return re.sub(r"(?<=\S)[ \t]{2,}", " ", cleaned), cited
