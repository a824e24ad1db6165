"""The extractive answer on long, sectioned pages: a section's heading counts for its lines;
a procedure and a short table answer whole.

A long policy page comes as several passages, one per section (a chunk never crosses a
heading, so a passage's heading is the section of all its lines).
"""

from __future__ import annotations

from retrieval.pipeline.answer import Passage, extractive_choice

TITLE = "Ausências e licenças remuneradas"


def _section(number: int, heading: str, text: str, position: int) -> Passage:
    return Passage(number, TITLE, heading, text, document="ausencias", position=position)


def _choice(question: str, *passages: Passage, language: str = "pt") -> tuple[str, list[str]]:
    built = extractive_choice(
        question=question, queries=[], passages=list(passages), language=language
    )
    return built.text, [line.heading for line in built.lines]


BLOOD = _section(
    1,
    "Doação voluntária de sangue",
    "A folga é de 1 dia a cada 6 meses, com a declaração do hemocentro. "
    "A declaração é anexada no portal de pessoas.",
    2,
)
WEDDING = _section(
    1,
    "Casamento",
    "A folga de casamento é de cinco dias úteis, com a certidão. "
    "A certidão é anexada no portal de pessoas em até cinco dias úteis após o retorno.",
    1,
)


def test_a_heading_that_says_the_question_lifts_its_sections_line() -> None:
    # Both sections say "folga" and "portal"; only one heading says the blood donation.
    text, headings = _choice("quantos dias de folga pela doação de sangue?", WEDDING, BLOOD)
    body = text.split("\n\n", 1)[1]
    assert body.lstrip("- ").startswith("A folga é de 1 dia a cada 6 meses")
    assert headings and headings[0] == "Doação voluntária de sangue"


PROCEDURE = _section(
    1,
    "Como registrar",
    "O registro é feito pelo próprio colaborador.\n\n"
    "1. Avise a liderança antes da ausência.\n"
    "2. Registre a ausência no portal de pessoas, escolhendo o motivo.\n"
    "3. Anexe o comprovante no portal em até cinco dias úteis após o retorno.",
    3,
)


def test_a_short_numbered_procedure_answers_whole() -> None:
    # A deadline question, not a how-to one: its line is step 3, and the procedure comes
    # whole, in order.
    text, _ = _choice("qual o prazo para anexar o comprovante da ausência?", PROCEDURE)
    numbered = [line[:2] for line in text.splitlines() if line[:2] in {"1.", "2.", "3."}]
    assert numbered == ["1.", "2.", "3."]
    assert "Avise a liderança" in text


def test_a_long_procedures_step_answers_alone_unless_the_question_asks_how() -> None:
    steps = "".join(
        f"{n}. Confira o item {n} da lista de verificação do setor antes de seguir adiante.\n"
        for n in range(1, 8)
    )
    long_procedure = _section(
        1,
        "Como registrar",
        steps + "8. Anexe o comprovante no portal em até cinco dias úteis após o retorno.",
        3,
    )
    text, _ = _choice("qual o prazo para anexar o comprovante da ausência?", long_procedure)
    assert "em até cinco dias úteis" in text
    assert "Confira o item 1" not in text
    text, _ = _choice("como faço para anexar o comprovante da ausência?", long_procedure)
    assert "Confira o item 1" in text and "8. Anexe o comprovante" in text


TABLE = _section(
    1,
    "Tabela de ausências",
    "| Motivo | Dias | Documento |\n|---|---|---|\n"
    "| Casamento | 5 dias úteis | certidão de casamento |\n"
    "| Luto | 5 dias úteis | certidão de óbito |\n"
    "| Doação de sangue | 1 dia a cada 6 meses | declaração do hemocentro |",
    4,
)


def test_a_short_table_answers_whole_its_chosen_row_first() -> None:
    text, _ = _choice("quanto tempo de folga no luto?", TABLE)
    rows = [line for line in text.splitlines() if line.startswith("- ")]
    # The row that answers first, then the rest of the table in its own order.
    assert [row.split(" — ")[0] for row in rows] == ["- Luto", "- Casamento", "- Doação de sangue"]
    assert "Dias: 5 dias úteis; Documento: certidão de óbito" in rows[0]


def test_a_long_tables_chosen_row_comes_with_its_column_names_alone() -> None:
    rows = "".join(f"| Motivo {n} | {n} dias | documento {n} |\n" for n in range(1, 12))
    long_table = _section(
        1,
        "Tabela de ausências",
        "| Motivo | Dias | Documento |\n|---|---|---|\n"
        + rows
        + "| Luto | 5 dias úteis | certidão de óbito |",
        4,
    )
    text, _ = _choice("quantos dias de ausência pelo luto?", long_table)
    assert "Luto — Dias: 5 dias úteis; Documento: certidão de óbito." in text
    # Not the whole table: at most the answer's few lines.
    assert sum(line.startswith("- ") for line in text.splitlines()) <= 4
