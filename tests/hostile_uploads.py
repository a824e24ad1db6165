"""Hostile upload files, each under 1 MB, written by code (issue 14, finding 5).

The attack planned 21 crafted uploads and ran 7 of them live; these are the others, and the
live ones, for the end-to-end test (`tests/retrieval/ingestion/test_hostile_uploads.py`) and
the timing script (`scripts/bench_hostile_uploads.py`). Each aims at one parser's weak spot:
a backtracking regex, a structure cap, a decompression ratio, or plain size.

`outcome` is a regex for what the upload must come to: "parsed" (a document is stored), or
the job's error for the file (refused with a reason a person understands).
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 1_000_000
PROSE = (
    "O empregado tem direito a trinta dias de férias após cada período de doze meses de "
    "trabalho, que podem ser divididos em até três períodos, um deles de pelo menos catorze "
    "dias; o pedido é feito ao gestor com trinta dias de antecedência pelo portal."
)
# What a refused file's error may say (the parsers' and the ingester's own words).
EXPANDS = r"compressed file that expands"
TIME_OR_CAP = r"took more than|XML elements|HTML elements|pages|characters"
# A document longer than CHATRAG_MAX_PASSAGES_PER_DOCUMENT is refused before it is embedded.
TOO_LONG = r"too long: \d+ passages"
NO_TEXT = r"no text"  # the parser's "no text could be extracted", or no passage
PARSED = r"^parsed$"


@dataclass(frozen=True)
class HostileUpload:
    name: str
    write: Callable[[Path], None]
    outcome: str  # a regex over "parsed" or the error
    aims_at: str


def _text(body: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(body, encoding="utf-8")

    return write


def docx(path: Path, body: str) -> None:
    """A minimal valid .docx whose document body is `body` (WordprocessingML)."""
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
            'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats'
            '-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
            'officedocument.wordprocessingml.document.main+xml"/></Types>',
        )
        archive.writestr(
            "_rels/.rels",
            '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
            '2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/'
            'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>'
            "</Relationships>",
        )
        archive.writestr(
            "word/document.xml",
            f'<?xml version="1.0"?><w:document {ns}><w:body>{body}</w:body></w:document>',
        )


def _docx(body: str) -> Callable[[Path], None]:
    return lambda path: docx(path, body)


def pdf(path: Path, stream: bytes, *, pages: int = 1) -> None:
    """A PDF of `pages` pages, each with the same Flate-compressed content `stream`.

    Written by hand (no library), so that the bytes are exactly the attack's: pypdf would
    re-encode or refuse to write some of these.
    """
    compressed = zlib.compress(stream, 9)
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, once the pages' numbers are known
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(compressed)
        + compressed
        + b"\nendstream",
    ]
    kids = []
    for _ in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 600 850] /Contents 4 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>"
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), pages)
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    path.write_bytes(bytes(out))


def _pdf(stream: bytes, pages: int = 1) -> Callable[[Path], None]:
    return lambda path: pdf(path, stream, pages=pages)


def _text_lines(count: int) -> bytes:
    line = f"({PROSE[:90]}) Tj 0 -9 Td ".encode()
    return b"BT /F1 8 Tf 10 800 Td " + line * count + b"ET"


def _giant_heading(path: Path) -> None:
    """Issue 38's upload: one `## ` heading of 800 KB of words, then 290 small sections."""
    words = ("política de férias e benefícios " * 26_000)[:800_000]
    sections = "".join(f"### Seção {i}\n\n{PROSE}\n\n" for i in range(290))
    path.write_text(f"# Manual\n\n## {words}\n\n{PROSE}\n\n{sections}", encoding="utf-8")


def _deep_headings(path: Path) -> None:
    """Six heading levels, each heading 20 KB of words, repeated under text: long paths."""
    heading = ("regra " * 3_400).strip()
    block = "".join(f"{'#' * level} {heading} {level}\n\n{PROSE}\n\n" for level in range(1, 7))
    path.write_text(block * 7, encoding="utf-8")


def _table_md(path: Path) -> None:
    """A Markdown table of 30 columns and 2,500 rows, one line per row (about 900 KB)."""
    row = "|" + "|".join(f" c{i} val " for i in range(30)) + "|\n"
    path.write_text("# Tabela\n\n" + row + "|---" * 30 + "|\n" + row * 2_500, encoding="utf-8")


def _table_html(path: Path) -> None:
    """An HTML table of 40,000 cells (about 700 KB)."""
    cells = "<td>valor 12,5</td>" * 40
    body = f"<tr>{cells}</tr>" * 1_000
    path.write_text(f"<h1>Tabela</h1><table>{body}</table>", encoding="utf-8")


HOSTILE_UPLOADS: list[HostileUpload] = [
    # Round three (issue 38, finding 1): text derived from the document and embedded with
    # every passage (heading paths, titles) must be bounded, whatever its length in the file.
    HostileUpload(
        "giant_heading.md",
        _giant_heading,
        PARSED,
        "the attack's 812 KB: one 800 KB '## ' heading followed by 290 small sections",
    ),
    HostileUpload(
        "deep_headings.md",
        _deep_headings,
        PARSED,
        "six levels of 20 KB headings, seven times: 120 KB heading paths",
    ),
    HostileUpload(
        "table_rows.md", _table_md, PARSED + "|" + TOO_LONG, "a 2,500-row Markdown table"
    ),
    HostileUpload(
        "table_cells.html", _table_html, PARSED + "|" + TOO_LONG, "an HTML table of 40,000 cells"
    ),
    HostileUpload(
        "long_line.txt",
        _text(("x" * 999 + " ") * 950),
        PARSED + "|" + TOO_LONG,
        "950 KB in one line of 1,000-character words",
    ),
    # Markdown: the heading regex was cubic in a heading line's length (24 s for 2 KB).
    HostileUpload(
        "heading_spaces.md",
        _text("# a" + " " * 2000 + "x\n\ntexto\n"),
        PARSED,
        "the attack's 2 KB heading line: '# a', 2000 spaces, 'x'",
    ),
    HostileUpload(
        "heading_spaces_long.md",
        _text("# a" + " " * 900_000 + "x\n\ntexto\n"),
        PARSED,
        "the same heading line at 900 KB",
    ),
    HostileUpload(
        "heading_hashes.md",
        _text("# " + " #" * 450_000 + "x\n\ntexto\n"),
        PARSED,
        "a heading of ' #' repeated (closing-hashes backtracking)",
    ),
    HostileUpload(
        "heading_lines.md",
        _text(("######" + " " * 40 + "#" * 40 + " " * 40 + "x\n") * 7_000),
        PARSED + "|" + NO_TEXT,
        "7,000 heading lines of spaces and hashes, no body",
    ),
    HostileUpload(
        "spaces_nl.md",
        _text((" " * 60 + "\n") * 16_000 + "x\n"),
        PARSED,
        "lines of spaces only: the blank-line and paragraph-break regexes",
    ),
    HostileUpload(
        "front_matter_newlines.md",
        _text("---" + "\n" * 900_000 + "x\n"),
        PARSED + "|" + TOO_LONG + "|" + NO_TEXT,
        "an unclosed front matter of newlines (the old regex was quadratic)",
    ),
    # HTML: comments, CDATA, deep nesting, runs of whitespace.
    HostileUpload(
        "comment_open.html",
        _text("<p>antes</p><!--" + "-" * 900_000),
        PARSED,
        "an HTML comment that never closes, 900 KB of dashes (hidden, not indexed)",
    ),
    HostileUpload(
        "comments_many.html",
        _text("<p>texto</p>" + "<!-- x -->" * 90_000),
        PARSED,
        "90,000 comments",
    ),
    HostileUpload(
        "cdata_open.html",
        _text("<p>antes</p><![CDATA[" + "]" * 900_000),
        PARSED,
        "a CDATA section that never closes, 900 KB of ']'",
    ),
    HostileUpload(
        "nested_divs.html",
        _text("<div>" * 199_000 + "x"),
        PARSED + "|" + TIME_OR_CAP,
        "199,000 nested elements, just under the cap",
    ),
    HostileUpload(
        "html_spaces.html",
        _text("<p>" + " \t" * 450_000 + "x</p>\n" + "\n \n" * 10_000),
        PARSED,
        "runs of spaces and tabs, and of blank lines",
    ),
    # PDF: text that expands past the ratio, a stream of nothing, too many pages.
    HostileUpload(
        "text_bomb.pdf",
        _pdf(_text_lines(60_000)),
        EXPANDS,
        "5 MB of text operators compressed to a few KB",
    ),
    HostileUpload(
        "zero_bomb.pdf",
        _pdf(b" " * 150_000_000),
        r"not a readable PDF \(LimitReachedError|took more than|memory|stopped",
        "150 MB of spaces in one content stream (about 150 KB compressed)",
    ),
    HostileUpload(
        "pages.pdf",
        _pdf(b"BT /F1 8 Tf 10 800 Td (x) Tj ET", pages=6_000),
        TIME_OR_CAP,
        "6,000 pages sharing one content stream",
    ),
    # DOCX: millions of empty paragraphs, one paragraph repeated.
    HostileUpload(
        "empty_paragraphs.docx",
        _docx("<w:p/>" * 3_000_000),
        TIME_OR_CAP,
        "the attack's .docx: 3 million empty paragraphs in 27 KB",
    ),
    HostileUpload(
        "repeated_paragraph.docx",
        _docx(f"<w:p><w:r><w:t>{PROSE * 6}</w:t></w:r></w:p>" * 3_700),
        EXPANDS,
        "one paragraph 3,700 times: 4.8 million characters from about 30 KB",
    ),
    # Plain text: sentence ends for the chunker.
    HostileUpload(
        "sentence_ends.txt",
        _text(". " * 450_000 + "x"),
        PARSED + "|" + TOO_LONG + "|" + NO_TEXT,
        "450,000 sentence ends for the chunker's sentence regex",
    ),
]
