"""Heading-aware chunking with a little overlap (pure: no I/O)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Text derived from a document and embedded with each of its passages (issue 38, finding 1):
# an 800 KB heading was joined into every passage's embedding text (290 copies, 1.5 GB). A
# heading or a title longer than a sentence is not a heading, so it is cut here, once.
HEADING_MAX_CHARS = 200
HEADING_PATH_MAX_CHARS = 500
TITLE_MAX_CHARS = 300
# What of them is embedded with each passage is bounded tighter: the context is paid again for
# every passage of the document (the engine's time grows with the tokens), and is the
# passage's context, not its text. The stored heading and title keep the bounds above (they
# are shown whole). The giant-heading upload (291 passages) embedded a 215-character context
# with every 230-character passage; no heading (52) or title (70) of the demo corpus is
# longer than these, so its vectors do not change.
EMBED_HEADING_MAX_CHARS = 60
EMBED_HEADING_PATH_MAX_CHARS = 150
EMBED_TITLE_MAX_CHARS = 100

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def clip(text: str, limit: int) -> str:
    """Cut text to at most `limit` characters, at a word when one ends in the second half."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", limit // 2, limit)
    return text[: cut if cut != -1 else limit].rstrip() + "…"


def heading_path(
    headings: list[str], *, each: int = HEADING_MAX_CHARS, whole: int = HEADING_PATH_MAX_CHARS
) -> str:
    """Join a heading path ("Férias › Quem tem direito"), each heading and the whole bounded."""
    return clip(" › ".join(clip(h, each) for h in headings), whole)


def embedded_context(title: str, heading: str) -> str:
    """The title and heading path as embedded with each passage ("Manual › Férias › Quem")."""
    path = heading_path(
        heading.split(" › ") if heading else [],
        each=EMBED_HEADING_MAX_CHARS,
        whole=EMBED_HEADING_PATH_MAX_CHARS,
    )
    return " › ".join(part for part in (clip(title, EMBED_TITLE_MAX_CHARS), path) if part)


@dataclass(frozen=True)
class Section:
    """A run of text under one heading path ("Férias › Quem tem direito")."""

    heading: str
    text: str


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk before embedding."""

    position: int
    heading: str
    text: str


def _pieces(text: str) -> list[str]:
    """Split text into non-empty paragraphs (overlong ones are cut by `_split_long`)."""
    pieces: list[str] = []
    for para in _PARAGRAPH_BREAK.split(text):
        para = para.strip()
        if para:
            pieces.append(para)
    return pieces


def _split_long(piece: str, max_chars: int) -> list[str]:
    if len(piece) <= max_chars:
        return [piece]
    out: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(piece):
        while len(sentence) > max_chars:  # one giant "sentence": cut at a space
            cut = sentence.rfind(" ", 0, max_chars)
            cut = cut if cut > max_chars // 2 else max_chars
            out.append((current + " " + sentence[:cut]).strip() if current else sentence[:cut])
            current = ""
            sentence = sentence[cut:].strip()
        if current and len(current) + 1 + len(sentence) > max_chars:
            out.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}".strip()
    if current:
        out.append(current)
    return out


def _tail(text: str, overlap: int) -> str:
    """Return about `overlap` characters from the end of text, starting at a word."""
    if overlap <= 0 or len(text) <= overlap:
        return "" if overlap <= 0 else text
    start = text.find(" ", len(text) - overlap)
    return text[start + 1 :] if start != -1 else ""


def chunk_sections(sections: list[Section], *, max_chars: int, overlap: int) -> list[ChunkDraft]:
    """Pack each section's paragraphs into chunks of at most about `max_chars`.

    Chunks never cross a heading, so a chunk's heading says what it is about; consecutive
    chunks of one section share about `overlap` characters so a sentence cut at a boundary
    is still found whole.
    """
    drafts: list[ChunkDraft] = []
    for section in sections:
        pieces = [p for piece in _pieces(section.text) for p in _split_long(piece, max_chars)]
        current = ""
        for piece in pieces:
            if current and len(current) + 2 + len(piece) > max_chars:
                drafts.append(ChunkDraft(len(drafts), section.heading, current))
                tail = _tail(current, overlap)
                current = f"{tail}\n\n{piece}" if tail else piece
            else:
                current = f"{current}\n\n{piece}" if current else piece
        if current.strip():
            drafts.append(ChunkDraft(len(drafts), section.heading, current))
    return drafts
