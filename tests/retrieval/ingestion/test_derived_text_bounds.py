"""Text derived from a document and embedded with each passage is bounded (issue 38, finding 1).

The attack: an 812 KB Markdown file, one `## ` heading of 800 KB followed by 290 small `###`
sections, held the worker for more than 24 minutes at 1.5 GB: the heading path was joined
whole into every passage's embedding text (only the stored heading was cut).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.ingestion.chunking import (
    EMBED_HEADING_MAX_CHARS,
    EMBED_HEADING_PATH_MAX_CHARS,
    EMBED_TITLE_MAX_CHARS,
    HEADING_MAX_CHARS,
    HEADING_PATH_MAX_CHARS,
    TITLE_MAX_CHARS,
    chunk_sections,
    clip,
)
from retrieval.ingestion.parsers import parse_file
from retrieval.ingestion.services import embedding_text
from tests.hostile_uploads import HOSTILE_UPLOADS, docx

CHUNK_CHARS = 1200
# Title, heading path, their separators and the passage: nothing else is embedded.
EMBED_MAX = TITLE_MAX_CHARS + HEADING_PATH_MAX_CHARS + CHUNK_CHARS + 10


def _embedded(path: Path) -> list[str]:
    parsed = parse_file(path, max_bytes=20_000_000)
    drafts = chunk_sections(parsed.sections, max_chars=CHUNK_CHARS, overlap=150)
    return [embedding_text(parsed.title, d.heading, d.text) for d in drafts]


@pytest.mark.parametrize("name", ["giant_heading.md", "deep_headings.md"])
def test_hostile_heading_is_bounded_in_every_embedded_text(tmp_path: Path, name: str) -> None:
    upload = next(u for u in HOSTILE_UPLOADS if u.name == name)
    path = tmp_path / name
    upload.write(path)
    texts = _embedded(path)
    assert len(texts) >= 7  # every section is still there, with its passage
    assert max(len(t) for t in texts) <= EMBED_MAX
    # The whole document embeds at most a bounded amount per passage, not 800 KB each.
    assert sum(len(t) for t in texts) <= len(texts) * EMBED_MAX


def test_each_passage_embeds_a_short_context_and_its_own_heading(tmp_path: Path) -> None:
    """The context is paid again with every passage: the giant heading's 290 sections embedded
    a 215-character context each (the engine's time grows with the tokens)."""
    path = tmp_path / "giant_heading.md"
    next(u for u in HOSTILE_UPLOADS if u.name == path.name).write(path)
    texts = _embedded(path)
    contexts = [t.split("\n", 1)[0] for t in texts]
    assert len(contexts) == 291
    assert max(len(c) for c in contexts) <= 100  # "Manual › política de férias e… › Seção 289"
    assert contexts[-1].startswith("Manual › política de férias")
    assert contexts[-1].endswith("… › Seção 289")
    bound = EMBED_TITLE_MAX_CHARS + 3 + EMBED_HEADING_PATH_MAX_CHARS + 1
    deep = tmp_path / "deep_headings.md"
    next(u for u in HOSTILE_UPLOADS if u.name == deep.name).write(deep)
    assert max(len(t.split("\n", 1)[0]) for t in _embedded(deep)) <= bound


def test_an_ordinary_title_and_heading_path_are_embedded_whole() -> None:
    title = "Política de reembolso de despesas de viagem nacionais e internacionais"  # 70
    heading = "Despesas com alimentação e hospedagem › Limites diários por cidade"
    assert len(title) <= EMBED_TITLE_MAX_CHARS
    assert max(len(h) for h in heading.split(" › ")) <= EMBED_HEADING_MAX_CHARS
    assert embedding_text(title, heading, "passagem") == f"{title} › {heading}\npassagem"


def test_giant_heading_keeps_its_start_and_the_sections_after_it(tmp_path: Path) -> None:
    path = tmp_path / "giant_heading.md"
    next(u for u in HOSTILE_UPLOADS if u.name == path.name).write(path)
    parsed = parse_file(path, max_bytes=20_000_000)
    headings = [s.heading for s in parsed.sections]
    assert headings[0].startswith("política de férias")
    assert len(headings[0]) <= HEADING_MAX_CHARS + 1
    assert headings[-1].endswith("› Seção 289")
    assert len(headings) == 291


@pytest.mark.parametrize(
    ("suffix", "body"),
    [
        (".md", "---\ntitle: {long}\n---\n\n## {long}\n\ntexto\n"),
        (".html", "<title>{long}</title><h2>{long}</h2><p>texto</p>"),
    ],
)
def test_titles_and_headings_from_any_parser_are_bounded(
    tmp_path: Path, suffix: str, body: str
) -> None:
    long = "palavra " * 50_000
    path = tmp_path / f"doc{suffix}"
    path.write_text(body.format(long=long), encoding="utf-8")
    parsed = parse_file(path, max_bytes=20_000_000)
    assert len(parsed.title) <= TITLE_MAX_CHARS + 1
    assert parsed.title.startswith("palavra palavra")
    assert all(len(s.heading) <= HEADING_MAX_CHARS + 1 for s in parsed.sections)


def test_docx_heading_is_bounded(tmp_path: Path) -> None:
    heading = " ".join(f"título{i}" for i in range(600))  # 5 KB, under the expansion cap
    path = tmp_path / "doc.docx"
    docx(
        path,
        f'<w:p><w:pPr><w:pStyle w:val="Heading2"/></w:pPr><w:r><w:t>{heading}</w:t></w:r></w:p>'
        "<w:p><w:r><w:t>texto do corpo</w:t></w:r></w:p>",
    )
    parsed = parse_file(path, max_bytes=20_000_000)
    assert parsed.sections and all(len(s.heading) <= HEADING_MAX_CHARS + 1 for s in parsed.sections)


def test_embedding_text_bounds_a_stored_long_title_and_heading() -> None:
    text = embedding_text("t" * 10_000, "h " * 10_000, "passagem")
    assert text.endswith("\npassagem")
    assert len(text) <= TITLE_MAX_CHARS + HEADING_PATH_MAX_CHARS + 20


def test_clip_cuts_at_a_word_and_leaves_short_text_alone() -> None:
    assert clip("curto", 10) == "curto"
    assert clip("uma frase bem longa aqui", 12) == "uma frase…"
    assert clip("x" * 30, 10) == "x" * 10 + "…"
