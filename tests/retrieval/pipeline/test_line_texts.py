"""`line_texts` is the answer's own line splitter, one passage at a time (pure).

Ingestion stores a vector for each of a chunk's `line_texts`; the answer scores the lines of
all found passages together, and drops a chunk's cut opening when another passage holds the
whole sentence. Every line it scores must be one of its passage's stored lines.
"""

from __future__ import annotations

from retrieval.pipeline.answer import Passage, line_texts
from retrieval.pipeline.answer.extractive import _lines, _whole_sentences

FIRST = (
    "O auxílio-creche é pago até a criança completar seis anos de idade, mediante "
    "comprovante de matrícula entregue ao RH.\n\n"
    "| Faixa | Valor mensal |\n|---|---|\n| 0 a 3 anos | R$ 600 |\n| 4 a 6 anos | R$ 450 |"
)
# The next chunk opens mid-sentence (chunks overlap at a word boundary).
SECOND = (
    "comprovante de matrícula entregue ao RH.\n\n"
    "Passos:\n1. Abra o portal\n2. Anexe o comprovante\n\n"
    "Dúvidas vão para o RH pelo canal interno."
)


def _answer_lines(passages: list[Passage]) -> list[tuple[Passage, str]]:
    """The candidate lines the extractive answer scores, as `extractive_choice` splits them."""
    lines = _whole_sentences([x for i, p in enumerate(passages) for x in _lines(p, i, "pt")])
    return [(line.passage, line.text) for line in lines]


def test_every_line_the_answer_scores_is_a_stored_line_of_its_passage() -> None:
    first = Passage(1, "Benefícios", "Creche", FIRST, "d", 0, "pt")
    second = Passage(1, "Benefícios", "Creche", SECOND, "d", 1, "pt")
    alone = _answer_lines([second])
    together = _answer_lines([first, second])
    for passage, text in alone + together:
        assert text in line_texts(passage, "pt"), text
    # Alone, the cut opening is a line shown cut; beside the passage with the whole
    # sentence, it is no line at all; either way its text is the stored one or absent.
    cut = "…comprovante de matrícula entregue ao RH."
    assert cut in line_texts(second, "pt")
    assert (second, cut) in alone and (second, cut) not in together
    assert "0 a 3 anos — Valor mensal: R$ 600." in line_texts(first, "pt")
    assert "Anexe o comprovante" in line_texts(second, "pt")
