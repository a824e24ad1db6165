"""What the chat pages render, built from stored rows without I/O (unit-testable).

- Text from users, documents and the model stays text: citations, `**bold**` and glossary
  highlights are split into segments here and marked up by the templates, which escape them.
- A stored trace is reshaped like the live `rewrite` frame, so one partial renders both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from conversations.models import Message, TurnTrace
from conversations.trace import (
    BACKEND_LABELS,
    QUERY_TYPE_LABELS,
    RULE_LABELS,
    read_trace,
    rewrite_block,
    rewrite_view,
)

# `**bold**` (the documents are Markdown) and `[n]` citations; nothing else is interpreted.
_INLINE = re.compile(r"\*\*(?P<bold>[^*\n]+?)\*\*|\[(?P<cite>\d{1,3})\]")
_SITE_PATH = re.compile(r"/[^\s\x00-\x1f\x7f]*")


def chat_labels() -> dict[str, Any]:
    """The texts chat.js shows, translated for the current request (passed as JSON)."""
    return {
        "states": {
            "pending": _("Pesquisando nos documentos…"),
            "streaming": _("Escrevendo a resposta…"),
            "stopped": _("Resposta interrompida."),
            "error": _(
                "Não foi possível responder agora. Sua mensagem foi guardada; tente de novo."
            ),
        },
        "queryTypes": QUERY_TYPE_LABELS,
        "backends": BACKEND_LABELS,
        "rules": RULE_LABELS,
        "weight": _("peso"),
        "untitled": _("Sem título"),
        "newConversation": _("Nova conversa"),
        "rename": _("Renomear “%(title)s”"),
        "delete": _("Excluir “%(title)s”"),
        "copied": _("Copiado."),
        "copyFailed": _("Não foi possível copiar."),
        "feedbackSaved": _("Obrigado pelo retorno."),
        "feedbackFailed": _("Não foi possível registrar o retorno."),
        "noResponse": _("Sem resposta do servidor. Recarregue a página."),
        "tooManySockets": _(
            "Há janelas demais do chat abertas. Feche uma delas: esta se conecta sozinha "
            "em até 30 segundos."
        ),
    }


# --- view models ------------------------------------------------------------------------------


@dataclass
class Segment:
    """A piece of text: plain, a citation of source `cite`, bold, or a highlighted expansion."""

    text: str
    cite: int = 0
    strong: bool = False
    mark: bool = False


@dataclass
class ListItem:
    """One item of a list in an answer, with the items nested under it."""

    segments: list[Segment]
    children: list[list[Segment]] = field(default_factory=list)


@dataclass
class Block:
    """A paragraph ("p"), a bulleted list ("ul") or a numbered one ("ol") of an answer."""

    kind: str
    segments: list[Segment] = field(default_factory=list)
    items: list[ListItem] = field(default_factory=list)
    start: int = 1


@dataclass
class TurnView:
    """One user message and the answer to it, ready for `conversations/_turn.html`."""

    user: Message | None
    answer: Message | None = None
    trace: dict[str, Any] | None = None
    blocks: list[Block] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    feedback: int = 0

    @property
    def state(self) -> str:
        """pending (no answer yet), streaming, or the answer's final status."""
        if self.answer is not None:
            return str(self.answer.status)
        if self.user is not None and self.user.status == Message.Status.ERROR:
            return "error"
        if self.user is not None and self.user.status == Message.Status.RECEIVED:
            return "pending"
        return "complete"


def text_segments(text: str, *, source_count: int = 0) -> list[Segment]:
    """Split text into plain runs, `**bold**` runs and `[n]` citations of existing sources."""
    segments: list[Segment] = []
    position = 0
    for match in _INLINE.finditer(text):
        bold, cite = match.group("bold"), match.group("cite")
        if cite is not None and not 1 <= int(cite) <= source_count:
            continue
        if match.start() > position:
            segments.append(Segment(text[position : match.start()]))
        if bold is not None:
            segments.append(Segment(bold, strong=True))
        else:
            segments.append(Segment(match.group(0), cite=int(cite)))
        position = match.end()
    if position < len(text):
        segments.append(Segment(text[position:]))
    return segments


# An answer's lists, as the extractive answer and models write them: "- item" (or "*", "•"),
# "  - item" under the one before, "3. step" (or "3)"). chat.js reads them the same way.
_BULLET = re.compile(r"^[-*•] (.*)$")
_NESTED = re.compile(r"^ {2,}[-*•] (.*)$")
_NUMBERED = re.compile(r"^(\d{1,3})[.)] (.*)$")


def answer_blocks(text: str, *, source_count: int = 0) -> list[Block]:
    """An answer as paragraphs and lists, each holding its `text_segments`; a blank line
    ends a paragraph or a list."""
    blocks: list[Block] = []
    lines: list[str] = []  # the paragraph being read
    open_list = False  # whether the next item continues blocks[-1]

    def paragraph_end() -> None:
        if lines:
            blocks.append(Block("p", text_segments("\n".join(lines), source_count=source_count)))
            lines.clear()

    def item(kind: str, body: str, start: int = 1) -> None:
        nonlocal open_list
        paragraph_end()
        if not (open_list and blocks[-1].kind == kind):
            blocks.append(Block(kind, start=start))
        blocks[-1].items.append(ListItem(text_segments(body, source_count=source_count)))
        open_list = True

    for line in text.split("\n"):
        nested = _NESTED.match(line)
        if nested and open_list and blocks[-1].items:
            blocks[-1].items[-1].children.append(
                text_segments(nested.group(1), source_count=source_count)
            )
        elif bullet := (nested or _BULLET.match(line)):
            item("ul", bullet.group(1))
        elif numbered := _NUMBERED.match(line):
            item("ol", numbered.group(2), int(numbered.group(1)))
        elif not line.strip():
            paragraph_end()
            open_list = False
        else:
            open_list = False
            lines.append(line)
    paragraph_end()
    return blocks


def safe_path(value: object) -> str:
    """A link target only when it is a path on this site; anything else links nowhere.

    Escaping keeps markup out of an href but not `javascript:` or `//elsewhere`; browsers
    also read `/\\host` as `//host` and drop tabs and newlines, so no whitespace is allowed.
    """
    if (
        isinstance(value, str)
        and _SITE_PATH.fullmatch(value) is not None
        and value[1:2] not in ("/", "\\")
    ):
        return value
    return "#"


def source_cards(sources: object) -> list[dict[str, Any]]:
    """The stored source cards of an answer, with their links checked."""
    if not isinstance(sources, list):
        return []
    return [{**s, "url": safe_path(s.get("url"))} for s in sources if isinstance(s, dict)]


@dataclass
class ChunkView:
    id: int
    heading: str
    segments: list[Segment]


def highlight_segments(text: str, phrases: list[str]) -> list[Segment]:
    """Split `text` so that each occurrence of a phrase (ignoring case) is a marked segment."""
    wanted = sorted({p for p in phrases if p.strip()}, key=len, reverse=True)
    if not wanted:
        return [Segment(text)]
    pattern = re.compile("|".join(re.escape(p) for p in wanted), re.IGNORECASE)
    segments: list[Segment] = []
    position = 0
    for match in pattern.finditer(text):
        if match.start() > position:
            segments.append(Segment(text[position : match.start()]))
        segments.append(Segment(match.group(0), mark=True))
        position = match.end()
    if position < len(text):
        segments.append(Segment(text[position:]))
    return segments


def trace_view(trace: TurnTrace | None, *, question: str) -> dict[str, Any] | None:
    """The stored rewrite of a turn as the live `rewrite` frame has it (`rewrite_block`), plus
    the labels and the glossary expansions marked in the queries that the page renders.

    Stored queries are the masked ones (traces never hold raw personal data).
    """
    if trace is None or not trace.rewrite:
        return None
    stored = read_trace(trace)
    view = rewrite_view(stored.rewrite, stored.searched)
    block = rewrite_block(view, original=question, errors=stored.errors)
    expansions = [g.expansion for g in view.glossary]
    for query, shown in zip(block["queries"], view.queries, strict=True):
        query["label"] = shown.type_label
        query["segments"] = highlight_segments(shown.text, expansions)
    for rule in block["rules"]:
        rule["label"] = str(RULE_LABELS.get(rule["id"], rule["id"]))
    block["backend_label"] = view.backend_label
    return block


def build_turns(messages_in_order: list[Message], feedback: dict[int, int]) -> list[TurnView]:
    """Pair each user message with its answer, in conversation order."""
    turns: list[TurnView] = []
    by_user: dict[int, TurnView] = {}
    for message in messages_in_order:
        if message.role == Message.Role.USER:
            turn = TurnView(user=message)
            try:
                stored_trace: TurnTrace | None = message.trace
            except TurnTrace.DoesNotExist:
                stored_trace = None
            turn.trace = trace_view(stored_trace, question=message.text)
            by_user[message.id] = turn
            turns.append(turn)
            continue
        owner = by_user.get(message.reply_to_id or 0)
        if owner is None or owner.answer is not None:
            owner = TurnView(user=None)
            turns.append(owner)
        owner.answer = message
        owner.blocks = answer_blocks(message.text, source_count=len(message.sources))
        owner.sources = source_cards(message.sources)
        owner.feedback = feedback.get(message.id, 0)
        if getattr(message, "no_longer_available", False):
            # Its rewrite block names what the answer came from (queries, options).
            owner.trace = None
    return turns
