"""Read Markdown, plain text, HTML, PDF and DOCX files into titled sections.

Files are untrusted (anyone with upload rights, or a shared folder): every parser is bounded.
- No regex here backtracks super-linearly (tests/retrieval/ingestion/test_parsers.py feeds
  each one pathological lines); headings are split with a linear pattern and stripped in
  Python.
- Caps per file (`ParseLimits`): characters of text, HTML elements, PDF pages, DOCX XML
  elements and uncompressed size (a 27 KB .docx can hold millions of empty paragraphs), and
  the text a compressed file (PDF, DOCX) may yield per byte of itself: a 27 KB .docx that
  repeats one paragraph gave 4.8 million characters, minutes of embedding for the worker.
- `parse_files_isolated` runs the parser in a forked child with a time limit per file and a
  memory budget: a parser library stuck on a crafted file costs its seconds, not the worker.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import resource
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from .chunking import HEADING_MAX_CHARS, TITLE_MAX_CHARS, Section, clip, heading_path

SUPPORTED_SUFFIXES = {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx"}


class ParseError(Exception):
    """The file cannot be read as a document (corrupt, empty, unsupported or too big)."""


@dataclass(frozen=True)
class ParseLimits:
    """What one file may cost: text extracted, structure, time and memory."""

    max_chars: int = 5_000_000
    max_html_elements: int = 200_000
    max_pdf_pages: int = 2_000
    max_docx_elements: int = 1_000_000
    max_docx_unzipped_bytes: int = 200_000_000
    seconds: float = 10.0
    memory_mb: int = 1024
    # Text a PDF or DOCX may yield per byte of the file (plain formats yield at most one),
    # beyond a floor for small files. Prose compresses about 3:1, so real documents stay
    # under it; a compression bomb of repeated text does not.
    max_chars_per_byte: float = 4.0
    min_chars_allowed: int = 100_000

    def chars_for(self, size: int) -> int:
        """The characters of text a compressed file of `size` bytes may yield."""
        by_size = max(self.min_chars_allowed, int(self.max_chars_per_byte * size))
        return min(self.max_chars, by_size)


DEFAULT_LIMITS = ParseLimits()


def _check_chars(count: int, limits: ParseLimits, *, size: int | None = None) -> None:
    """Refuse more text than `limits` allows, or (`size`: a compressed file) its size allows."""
    if count > limits.max_chars:
        raise ParseError(f"more than {limits.max_chars:,} characters of text")
    if size is not None and count > limits.chars_for(size):
        raise ParseError(
            f"more than {limits.chars_for(size):,} characters of text from a file of "
            f"{size:,} bytes (a compressed file that expands this much is refused)"
        )


@dataclass
class ParsedDocument:
    title: str
    sections: list[Section]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections)


# Linear: `\s+` then anything. The old `(.+?)\s*#*\s*$` tried every split of a long run of
# spaces between its three parts (13 s for "# a" + 2000 spaces + "x"); the closing #s and
# spaces are stripped in `_heading_text` instead.
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


def _heading_text(rest: str) -> str:
    """A heading's text without its optional closing #s and the spaces around them."""
    text = rest.rstrip()
    bare = text.rstrip("#").rstrip()
    return clip((bare or text[:1]).strip(), HEADING_MAX_CHARS)


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    """Split `key: value` front matter (between --- lines) from the body.

    Line by line, not a regex: `\\A---\\s*\\n(.*?)\\n---\\s*\\n` went quadratic on "---"
    followed by many blank lines and no closing fence (36 s at 50 000 lines).
    """
    first = text.find("\n")
    if not text.startswith("---") or first < 0 or text[3:first].strip():
        return {}, text
    start = position = first + 1
    while True:
        end = text.find("\n", position)
        if end < 0:
            return {}, text  # no closing fence followed by a newline
        if text.startswith("---", position) and not text[position + 3 : end].strip():
            break
        position = end + 1
    meta: dict[str, str] = {}
    for line in text[start:position].splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            meta[key.strip().lower()] = value.strip().strip("\"'")
    return meta, text[end + 1 :]


def parse_markdown(text: str, fallback_title: str) -> ParsedDocument:
    meta, body = _front_matter(text)
    title = meta.get("title", "")
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    buffer: list[str] = []

    def flush() -> None:
        chunk = "\n".join(buffer).strip()
        if chunk:
            sections.append(Section(heading_path([h for _, h in stack]), chunk))
        buffer.clear()

    for line in body.splitlines():
        match = _MD_HEADING.match(line)
        if match:
            flush()
            level, heading = len(match.group(1)), _heading_text(match.group(2))
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


_HTML_SPACES = re.compile(r"[ \t]+")
# Linear: a match can fail only inside one run of whitespace without a second newline.
_HTML_BLANK_LINES = re.compile(r"\n\s*\n+")


# An element a browser does not show (issue 38, finding 5: a `<p style="display:none">` was
# indexed and quoted): what it holds is not indexed either.
_HIDDEN_STYLE = re.compile(r"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*hidden)", re.I)
# Elements that have no end tag: a hidden one hides nothing after it.
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


def _hidden(attrs: list[tuple[str, str | None]]) -> bool:
    for name, value in attrs:
        if name == "hidden" or (name == "aria-hidden" and (value or "").lower() == "true"):
            return True
        if name == "style" and value and _HIDDEN_STYLE.search(value):
            return True
    return False


class _HTMLSections(HTMLParser):
    _SKIP = {"script", "style", "nav", "footer", "head", "template", "noscript"}
    _BLOCK = {"p", "div", "li", "br", "tr", "section", "article", "table", "ul", "ol"}

    def __init__(self, max_elements: int = DEFAULT_LIMITS.max_html_elements) -> None:
        super().__init__()
        self._max_elements = max_elements
        self._elements = 0
        self.title = ""
        self.sections: list[Section] = []
        self._heading: list[str] = []
        self._buffer: list[str] = []
        self._skip = 0
        self._in_title = False
        self._in_heading: int | None = None
        self._heading_text: list[str] = []
        # The hidden element being skipped, and how many of its tag are open inside it.
        self._hidden_tag = ""
        self._hidden_depth = 0

    def _flush(self) -> None:
        text = _HTML_SPACES.sub(" ", "".join(self._buffer))
        text = _HTML_BLANK_LINES.sub("\n\n", text).strip()
        if text:
            self.sections.append(Section(heading_path(self._heading), text))
        self._buffer = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._elements += 1
        if self._elements > self._max_elements:
            raise ParseError(f"more than {self._max_elements:,} HTML elements")
        if self._hidden_tag:
            self._hidden_depth += tag == self._hidden_tag
            return
        if tag not in _VOID and _hidden(attrs):
            self._hidden_tag, self._hidden_depth = tag, 1
            return
        if tag in self._SKIP:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        elif len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self._flush()
            self._in_heading = int(tag[1])
            self._heading_text = []
        elif tag in self._BLOCK:
            self._buffer.append("\n\n" if tag in {"p", "div", "section", "article"} else "\n")

    def handle_endtag(self, tag: str) -> None:
        if self._hidden_tag:
            if tag == self._hidden_tag:
                self._hidden_depth -= 1
                if not self._hidden_depth:
                    self._hidden_tag = ""
            return
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        elif self._in_heading is not None and tag == f"h{self._in_heading}":
            heading = clip(" ".join("".join(self._heading_text).split()), HEADING_MAX_CHARS)
            level = self._in_heading
            self._in_heading = None
            if level == 1 and (not self.title or heading == self.title):
                self.title = self.title or heading
                self._heading = []
            else:
                self._heading = self._heading[: max(0, level - 2)] + [heading]

    def handle_data(self, data: str) -> None:
        if self._hidden_tag:
            return
        if self._in_title:
            self.title = self.title or data.strip()
        elif self._in_heading is not None:
            self._heading_text.append(data)
        elif not self._skip:
            self._buffer.append(data)

    def close(self) -> None:
        # A comment or CDATA section left open runs to the end of the file, hidden, as a
        # browser shows it; Python 3.11's html.parser would hand it over as text, so that
        # words no reader sees (an injection, say) were indexed.
        if self.rawdata.lstrip()[:9].lower().startswith(("<!--", "<![cdata[")):
            self.rawdata = ""
        super().close()
        self._flush()


def parse_html(
    text: str, fallback_title: str, limits: ParseLimits = DEFAULT_LIMITS
) -> ParsedDocument:
    parser = _HTMLSections(limits.max_html_elements)
    parser.feed(text)
    parser.close()
    return ParsedDocument(parser.title or fallback_title, parser.sections)


# Bytes of shown strings a page's content may hold, per character of text still allowed,
# before the rest of it is parsed only if the start did not already exceed the budget. Four:
# a character is one byte in simple fonts, two in CID fonts; a glyph without a Unicode
# mapping is none, which is why the stream is then read whole instead of refused.
_PDF_STRING_BYTES_PER_CHAR = 4
_PDF_SHOWS_TEXT = {b"Tj", b"TJ", b"'", b'"'}


class _Enough(Exception):
    """The strings parsed so far are enough to tell whether the page is over the budget."""


class _CountingOperations(list[tuple[Any, bytes]]):
    """pypdf's parsed operations, stopping the parse once their strings pass `cap` bytes."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap, self.string_bytes = cap, 0

    def append(self, item: tuple[Any, bytes]) -> None:
        super().append(item)
        operands, operator = item
        if operator in _PDF_SHOWS_TEXT:
            self.string_bytes += sum(len(o) for o in _strings(operands))
            if self.string_bytes > self.cap:
                raise _Enough


def _strings(operands: Any) -> list[Any]:
    found: list[Any] = []
    for operand in operands if isinstance(operands, list) else []:
        if isinstance(operand, list):
            found += _strings(operand)
        elif isinstance(operand, str | bytes):
            found.append(operand)
    return found


def _page_text(page: Any, reader: Any, counter: Callable[[], Any], *, allowed: int) -> str:
    """A page's text, with a `counter()` hearing it as pypdf extracts it.

    pypdf parses a page's whole content stream before it extracts the first character:
    text_bomb.pdf's 5 MB of text operators took 2.5 s of CPU to parse, and its text was over
    the budget after the first 100 KB. So the stream is parsed first only until its strings
    could hold the text still `allowed`; text past the budget from that start is refused at
    once. Only a start that stayed within it (glyphs that map to no text) is read again whole.
    """
    from pypdf.generic import ContentStream, NameObject

    original = page.get(NameObject("/Contents"))
    if original is None:
        return str(page.extract_text(visitor_text=counter()) or "")
    content = ContentStream(original.get_object(), reader, "bytes")
    data = content.get_data()
    cap = _PDF_STRING_BYTES_PER_CHAR * max(allowed, 0)
    if len(data) <= cap:  # strings are a part of the stream: it cannot pass the cap
        return str(page.extract_text(visitor_text=counter()) or "")
    operations = _CountingOperations(cap)
    content._operations = operations
    try:
        content._parse_content_stream(io.BytesIO(data))
    except _Enough:
        pass
    else:  # parsed whole within the cap: the operations are the page's
        content._data = b""
        page[NameObject("/Contents")] = content
        return str(page.extract_text(visitor_text=counter()) or "")
    content._data = b""
    page[NameObject("/Contents")] = content
    page.extract_text(visitor_text=counter())  # raises ParseError when the start is over
    page[NameObject("/Contents")] = original  # within it: read again, whole
    return str(page.extract_text(visitor_text=counter()) or "")


def parse_pdf(
    path: Path, fallback_title: str, limits: ParseLimits = DEFAULT_LIMITS
) -> ParsedDocument:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(str(path))
        # The page tree's own count first: counting the pages walks the whole tree (6,000
        # pages took seconds of CPU); a tree that lies low is still counted below.
        tree = reader.root_object.get("/Pages")
        declared = tree.get_object().get("/Count") if tree is not None else None
        if isinstance(declared, int) and declared > limits.max_pdf_pages:
            raise ParseError(f"more than {limits.max_pdf_pages:,} pages")
        if len(reader.pages) > limits.max_pdf_pages:
            raise ParseError(f"more than {limits.max_pdf_pages:,} pages")
        title = (reader.metadata.title if reader.metadata else None) or fallback_title
        sections = []
        chars = 0
        size = path.stat().st_size
        for number, page in enumerate(reader.pages, start=1):

            def counter(before: int = chars) -> Callable[[str], None]:
                seen = before

                def count(text: str, *_: Any) -> None:
                    # Counted as pypdf reads the page, so a page of a million characters
                    # from a few KB stops at the budget instead of being read whole.
                    nonlocal seen
                    seen += len(text)
                    _check_chars(seen, limits, size=size)

                return count

            allowed = limits.chars_for(size) - chars
            page_text = _page_text(page, reader, counter, allowed=allowed).strip()
            chars += len(page_text)
            _check_chars(chars, limits, size=size)
            if page_text:
                sections.append(Section(f"p. {number}", page_text))
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ParseError(f"not a readable PDF ({exc.__class__.__name__}: {exc})") from exc
    return ParsedDocument(str(title), sections)


def _docx_bounded(path: Path, limits: ParseLimits) -> None:
    """Refuse a DOCX whose XML is too big or too many elements, before loading it whole.

    python-docx builds the whole tree (and a proxy per paragraph): 3 million empty
    paragraphs, 27 KB zipped, took over 1.2 GB and minutes. Counting the elements as a
    stream costs little and stops at the cap.
    """
    import zipfile

    from lxml import etree

    with zipfile.ZipFile(path) as archive:
        unzipped = sum(info.file_size for info in archive.infolist())
        if unzipped > limits.max_docx_unzipped_bytes:
            raise ParseError(f"more than {limits.max_docx_unzipped_bytes // 1_000_000} MB unzipped")
        names = set(archive.namelist())
        if "word/document.xml" not in names:
            return  # python-docx says what is wrong
        # Each element has one or two tags, and only tags hold a "<": counting them in C
        # settles most files at once (3 million empty paragraphs: 0.03 s of CPU, where
        # parsing them up to the cap took a second), and iterparse counts the rest exactly.
        tags = 0
        with archive.open("word/document.xml") as stream:
            while block := stream.read(1 << 20):
                tags += block.count(b"<")
        if tags <= limits.max_docx_elements:
            return
        if tags > 2 * limits.max_docx_elements + 1:
            raise ParseError(f"more than {limits.max_docx_elements:,} XML elements")
        elements = 0
        with archive.open("word/document.xml") as stream:
            for _, element in etree.iterparse(stream, events=("end",), resolve_entities=False):
                elements += 1
                if elements > limits.max_docx_elements:
                    raise ParseError(f"more than {limits.max_docx_elements:,} XML elements")
                element.clear()


_DOCX_HEADING = re.compile(r"Heading (\d)")


def parse_docx(
    path: Path, fallback_title: str, limits: ParseLimits = DEFAULT_LIMITS
) -> ParsedDocument:
    import zipfile

    import docx
    from docx.opc.exceptions import OpcError
    from lxml.etree import LxmlError

    try:
        _docx_bounded(path, limits)
        document = docx.Document(str(path))
    except (OpcError, zipfile.BadZipFile, LxmlError, KeyError, ValueError, OSError) as exc:
        raise ParseError(f"not a readable DOCX ({exc.__class__.__name__})") from exc
    title = document.core_properties.title or ""
    chars = 0
    size = path.stat().st_size
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    buffer: list[str] = []

    def flush() -> None:
        chunk = "\n\n".join(buffer).strip()
        if chunk:
            sections.append(Section(heading_path([h for _, h in stack]), chunk))
        buffer.clear()

    for para in document.paragraphs:
        style = para.style.name if para.style is not None and para.style.name else ""
        text = para.text.strip()
        if not text:
            continue
        chars += len(text)
        _check_chars(chars, limits, size=size)
        match = _DOCX_HEADING.match(style)
        if style == "Title" or match:
            flush()
            text = clip(text, HEADING_MAX_CHARS)
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


def parse_file(
    path: Path, *, max_bytes: int, limits: ParseLimits = DEFAULT_LIMITS
) -> ParsedDocument:
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
        parsed = parse_pdf(path, fallback, limits)
    elif suffix == ".docx":
        parsed = parse_docx(path, fallback, limits)
    else:
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        if "\x00" in text:
            raise ParseError("binary content in a text file")
        _check_chars(len(text), limits)
        if suffix in {".html", ".htm"}:
            parsed = parse_html(text, fallback, limits)
        elif suffix == ".txt":
            parsed = parse_text(text, fallback)
        else:
            parsed = parse_markdown(text, fallback)
    if not parsed.text.strip():
        raise ParseError("no text could be extracted")
    if len(parsed.title) > TITLE_MAX_CHARS:  # front matter, <title>, PDF or DOCX metadata
        parsed.title = clip(parsed.title, TITLE_MAX_CHARS)
    return parsed


def _parse_result(path: Path, max_bytes: int, limits: ParseLimits) -> tuple[str, Any]:
    try:
        return ("ok", parse_file(path, max_bytes=max_bytes, limits=limits))
    except ParseError as exc:
        return ("error", str(exc))
    except MemoryError:
        return ("error", f"needs more than {limits.memory_mb} MB of memory to read")
    except Exception as exc:  # a parser library choking on a corrupt file
        return ("error", f"unreadable ({exc.__class__.__name__})")


def _parse_in_child(conn: Any, paths: Sequence[Path], max_bytes: int, limits: ParseLimits) -> None:
    # Address space: what the parent had (inherited, mostly shared) plus the budget.
    with open("/proc/self/statm") as statm:
        current = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    budget = current + limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (budget, budget))
    for path in paths:
        conn.recv()  # the parent's go: each file's time is counted from its start
        conn.send(_parse_result(path, max_bytes, limits))
    conn.close()


def parse_files_isolated(
    paths: Sequence[Path],
    *,
    max_bytes: int,
    limits: ParseLimits = DEFAULT_LIMITS,
    on_file: Callable[[Path], object] | None = None,
) -> Iterator[tuple[Path, ParsedDocument | ParseError]]:
    """`parse_file` of each path in a forked child, each file within `limits.seconds` and
    the child within a memory budget; yields (path, document or error) in order.

    One child reads the files one at a time, each when the parent asks for it (a fork cost
    more than reading a page of text: 7-20 ms against 0.02 ms); a file that runs past its
    time or kills the child is that file's error, and a new child reads the rest. `on_file`
    hears each file before it is read. Fork, not spawn: the child starts at once with the
    parsers already imported (the parent imports them first, so no import lock held by
    another thread can be inherited).
    """
    import docx  # noqa: F401 - imported before forking, see above
    import pypdf  # noqa: F401

    context = multiprocessing.get_context("fork")
    pending = list(paths)
    while pending:
        conn, child_conn = context.Pipe()
        child = context.Process(
            target=_parse_in_child, args=(child_conn, pending, max_bytes, limits), daemon=True
        )
        child.start()
        child_conn.close()
        try:
            while pending:
                path = pending.pop(0)
                if on_file is not None:
                    on_file(path)
                error: ParseError | None = None
                try:
                    conn.send(True)
                    if conn.poll(limits.seconds):
                        kind, value = conn.recv()
                    else:
                        error = ParseError(f"took more than {limits.seconds:g} s to read")
                except (EOFError, BrokenPipeError):  # killed: out of memory in C code, a signal
                    error = ParseError("the parser stopped on this file (too big or malformed)")
                if error is not None:
                    child.kill()  # the rest of the files go to a new child
                    yield path, error
                    break
                yield path, (value if kind == "ok" else ParseError(str(value)))
        finally:
            conn.close()
            if child.is_alive():
                child.kill()
            child.join()


def parse_file_isolated(
    path: Path, *, max_bytes: int, limits: ParseLimits = DEFAULT_LIMITS
) -> ParsedDocument:
    """`parse_file` in a forked child, killed after `limits.seconds`, within a memory budget
    (`parse_files_isolated` of one file)."""
    [(_, result)] = parse_files_isolated([path], max_bytes=max_bytes, limits=limits)
    if isinstance(result, ParseError):
        raise result
    return result
