from __future__ import annotations

from retrieval.ingestion.chunking import Section, chunk_sections


def test_chunks_never_cross_a_heading() -> None:
    sections = [Section("Férias", "a " * 50), Section("Férias › Abono", "b " * 50)]
    chunks = chunk_sections(sections, max_chars=1000, overlap=50)
    assert [c.heading for c in chunks] == ["Férias", "Férias › Abono"]
    assert [c.position for c in chunks] == [0, 1]


def test_long_section_splits_with_overlap() -> None:
    paragraphs = [f"Parágrafo {i}. " + "palavra " * 30 for i in range(10)]
    chunks = chunk_sections([Section("S", "\n\n".join(paragraphs))], max_chars=600, overlap=80)
    assert len(chunks) > 2
    assert all(len(c.text) <= 600 + 80 + 2 for c in chunks)
    # consecutive chunks share their boundary text
    for previous, current in zip(chunks, chunks[1:], strict=False):
        assert previous.text[-40:].split()[-1] in current.text[:120]


def test_giant_sentence_is_cut_at_spaces() -> None:
    text = "x" * 10 + " " + "palavra " * 400
    chunks = chunk_sections([Section("", text)], max_chars=500, overlap=0)
    assert len(chunks) >= 6
    assert all(len(c.text) <= 500 for c in chunks)
    joined = " ".join(c.text for c in chunks).split()
    assert joined.count("palavra") == 400


def test_empty_sections_make_no_chunks() -> None:
    assert chunk_sections([Section("H", "  \n\n ")], max_chars=500, overlap=50) == []
