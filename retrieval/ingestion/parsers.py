"""Read Markdown, plain text, HTML, PDF and DOCX files into titled sections."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from .chunking import Section

SUPPORTED_SUFFIXES = {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx"}


class ParseError(Exception):
    """The file cannot be read as a document (corrupt, empty or unsupported)."""


@dataclass
class ParsedDocument:
    title: str
    sections: list[Section]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """Split `key: value` front matter (between --- lines) from the body."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, text
    meta: dict[str, str] = {}
    for line in match.group(1).splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            meta[key.strip().lower()] = value.strip().strip("\"'")
    return meta, text[match.end() :]


def parse_markdown(text: str, fallback_title: str) -> ParsedDocument:
    meta, body = _front_matter(text)
    title = meta.get("title", "")
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    buffer: list[str] = []

    def flush() -> None:
        chunk = "\n".join(buffer).strip()
        if chunk:
            sections.append(Section(" › ".join(h for _, h in stack), chunk))
        buffer.clear()

    for line in body.splitlines():
        match = _MD_HEADING.match(line)
        if match:
            flush()
            level, heading = len(match.group(1)), match.group(2).strip()
            if level == 1 and not title:
                title = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            if level > 1 or heading != title:
                stack.append((level, heading))
        else:
            buffer.append(line)
    flush()
    return ParsedDocument(title or fallback_title, sections, meta)


def parse_text(text: str, fallback_title: str) -> ParsedDocument:
    meta, body = _front_matter(text)
    return ParsedDocument(meta.get("title", fallback_title), [Section("", body.strip())], meta)


class _HTMLSections(HTMLParser):
    _SKIP = {"script", "style", "nav", "footer", "head"}
    _BLOCK = {"p", "div", "li", "br", "tr", "section", "article", "table", "ul", "ol"}

    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.sections: list[Section] = []
        self._heading: list[str] = []
        self._buffer: list[str] = []
        self._skip = 0
        self._in_title = False
        self._in_heading: int | None = None
        self._heading_text: list[str] = []

    def _flush(self) -> None:
        text = re.sub(r"[ \t]+", " ", "".join(self._buffer))
        text = re.sub(r"\n\s*\n+", "\n\n", text).strip()
        if text:
            self.sections.append(Section(" › ".join(self._heading), text))
        self._buffer = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self._in_heading = int(tag[1])
            self._heading_text = []
        elif tag in self._BLOCK:
            self._buffer.append("\n\n" if tag in {"p", "div", "section", "article"} else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        elif self._in_heading is not None and tag == f"h{self._in_heading}":
            heading = " ".join("".join(self._heading_text).split())
            level = self._in_heading
            self._in_heading = None
            if level == 1 and (not self.title or heading == self.title):
                self.title = self.title or heading
                self._heading = []
            else:
                self._heading = self._heading[: max(0, level - 2)] + [heading]

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = self.title or data.strip()
        elif self._in_heading is not None:
            self._heading_text.append(data)
        elif not self._skip:
            self._buffer.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def parse_html(text: str, fallback_title: str) -> ParsedDocument:
    parser = _HTMLSections()
    parser.feed(text)
    parser.close()
    return ParsedDocument(parser.title or fallback_title, parser.sections)


def parse_pdf(path: Path, fallback_title: str) -> ParsedDocument:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(str(path))
        title = (reader.metadata.title if reader.metadata else None) or fallback_title
        sections = []
        for number, page in enumerate(reader.pages, start=1):
            page_text = (page.extract_text() or "").strip()
            if page_text:
                sections.append(Section(f"p. {number}", page_text))
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ParseError(f"not a readable PDF ({exc.__class__.__name__}: {exc})") from exc
    return ParsedDocument(str(title), sections)


def parse_docx(path: Path, fallback_title: str) -> ParsedDocument:
    import zipfile

    import docx
    from docx.opc.exceptions import OpcError

    try:
        document = docx.Document(str(path))
    except (OpcError, zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise ParseError(f"not a readable DOCX ({exc.__class__.__name__})") from exc
    title = document.core_properties.title or ""
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    buffer: list[str] = []

    def flush() -> None:
        chunk = "\n\n".join(buffer).strip()
        if chunk:
            sections.append(Section(" › ".join(h for _, h in stack), chunk))
        buffer.clear()

    for para in document.paragraphs:
        style = para.style.name if para.style is not None and para.style.name else ""
        text = para.text.strip()
        if not text:
            continue
        match = re.match(r"Heading (\d)", style)
        if style == "Title" or match:
            flush()
            level = int(match.group(1)) if match else 0
            if level <= 1 and not title:
                title = text
                continue
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
        else:
            buffer.append(text)
    flush()
    return ParsedDocument(title or fallback_title, sections)


def parse_file(path: Path, *, max_bytes: int) -> ParsedDocument:
    """Parse one file by its suffix; raise ParseError with a reason a person understands."""
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ParseError(f"unsupported file type {suffix or '(none)'}")
    size = path.stat().st_size
    if size == 0:
        raise ParseError("empty file")
    if size > max_bytes:
        raise ParseError(f"file too large ({size // 1_000_000} MB > {max_bytes // 1_000_000} MB)")
    fallback = path.stem.replace("-", " ").replace("_", " ").strip().capitalize()
    if suffix == ".pdf":
        parsed = parse_pdf(path, fallback)
    elif suffix == ".docx":
        parsed = parse_docx(path, fallback)
    else:
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        if "\x00" in text:
            raise ParseError("binary content in a text file")
        if suffix in {".html", ".htm"}:
            parsed = parse_html(text, fallback)
        elif suffix == ".txt":
            parsed = parse_text(text, fallback)
        else:
            parsed = parse_markdown(text, fallback)
    if not parsed.text.strip():
        raise ParseError("no text could be extracted")
    return parsed
