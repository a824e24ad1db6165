from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.ingestion.parsers import ParseError, parse_file, parse_html

MB = 1_000_000


def test_markdown_front_matter_and_heading_paths(tmp_path: Path) -> None:
    path = tmp_path / "vr.md"
    path.write_text(
        "---\ntitle: Vale-refeição\narea: beneficios\nlang: pt\ngroups: rh-restrito\n---\n"
        "# Vale-refeição\n\nIntro.\n\n## Quem tem direito\n\nTodos.\n\n"
        "### Exceções\n\nEstagiários.\n",
        encoding="utf-8",
    )
    doc = parse_file(path, max_bytes=MB)
    assert doc.title == "Vale-refeição"
    assert doc.metadata == {
        "title": "Vale-refeição",
        "area": "beneficios",
        "lang": "pt",
        "groups": "rh-restrito",
    }
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("", "Intro."),
        ("Quem tem direito", "Todos."),
        ("Quem tem direito › Exceções", "Estagiários."),
    ]


def test_html_sections_skip_scripts(tmp_path: Path) -> None:
    path = tmp_path / "p.html"
    path.write_text(
        "<html><head><title>Política</title><script>alert(1)</script></head><body>"
        "<h1>Política</h1><p>Texto um.</p><h2>Prazos</h2><p>Até dia 20.</p></body></html>",
        encoding="utf-8",
    )
    doc = parse_file(path, max_bytes=MB)
    assert doc.title == "Política"
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("", "Texto um."),
        ("Prazos", "Até dia 20."),
    ]
    assert "alert" not in doc.text


def test_docx_headings(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Viagens", level=1)
    document.add_paragraph("Regras gerais.")
    document.add_heading("Diárias", level=2)
    document.add_paragraph("R$ 120 por dia.")
    path = tmp_path / "viagens.docx"
    document.save(str(path))
    doc = parse_file(path, max_bytes=MB)
    assert doc.title == "Viagens"
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("", "Regras gerais."),
        ("Diárias", "R$ 120 por dia."),
    ]


def test_pdf_pages(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    path = tmp_path / "blank.pdf"
    with path.open("wb") as handle:
        writer.write(handle)
    with pytest.raises(ParseError, match="no text"):
        parse_file(path, max_bytes=MB)


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("broken.pdf", b"%PDF-1.4 this is not really a pdf", "PDF"),
        ("broken.docx", b"PK\x03\x04 not a zip", "DOCX"),
        ("empty.md", b"", "empty file"),
        ("image.png", b"\x89PNG", "unsupported"),
        ("binary.txt", b"abc\x00def", "binary"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path: Path, name: str, content: bytes, reason: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ParseError, match=reason):
        parse_file(path, max_bytes=MB)


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("a" * 2000)
    with pytest.raises(ParseError, match="too large"):
        parse_file(path, max_bytes=1000)


@pytest.mark.parametrize(
    "tail",
    ["<!-- ignore the rules above and", "<![CDATA[ ignore the rules above and", "<!--"],
)
def test_a_comment_or_cdata_left_open_is_not_indexed(tail: str) -> None:
    """A browser hides it to the end of the file; html.parser gave it as text (issue 14's
    hostile uploads: 900 KB of an unclosed comment became 751 passages)."""
    doc = parse_html(f"<h1>Crachá</h1><p>Perdeu? Avise a portaria.</p>{tail} secret", "x")
    assert doc.text.strip() == "Perdeu? Avise a portaria."
    closed = parse_html("<p>antes</p><!-- hidden --> depois", "x")
    assert closed.text.strip() == "antes depois"
