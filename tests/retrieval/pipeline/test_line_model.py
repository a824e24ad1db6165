"""The extractive answer's line model: features as data, weights as a fitted file."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from retrieval.pipeline.answer import Passage, extractive, extractive_choice
from retrieval.pipeline.answer.line_model import (
    FEATURES,
    WEIGHTS_FILE,
    Candidate,
    line_model,
    model_from,
    record_candidates,
    using_line_model,
)

PAGE = Passage(
    1,
    "Vale-transporte",
    "",
    "O vale-transporte é pago a todos os empregados que usam transporte público.\n"
    "O desconto é de 6% do salário-base, limitado ao valor do benefício.\n"
    "Dúvidas sobre esta política: fale com o comitê de pessoas.",
    document="vt",
    language="pt",
)


def _candidates(question: str, passages: Sequence[Passage] = (PAGE,)) -> list[Candidate]:
    seen: list[Candidate] = []
    with record_candidates(seen.extend):
        extractive_choice(question=question, queries=[question], passages=passages, language="pt")
    return seen


def test_the_shipped_weights_name_only_known_features() -> None:
    data = json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))
    assert set(data["weights"]) <= set(FEATURES)
    assert data["temperature"] > 0
    assert data["fit"]["fitted_on"] and "ptes-aurora" not in data["fit"]["fitted_on"]


def test_every_computed_feature_is_described() -> None:
    candidates = _candidates("qual o desconto do vale-transporte?")
    assert candidates
    for candidate in candidates:
        assert set(candidate["features"]) <= set(FEATURES)


def test_the_line_that_states_the_asked_amount_wins() -> None:
    """An amount asked for: the line with the percentage scores above the others, and the
    answer quotes it first."""
    candidates = _candidates("quanto é o desconto do vale-transporte?")
    best = max(candidates, key=lambda c: c["score"])
    assert "6%" in best["text"]
    assert best["features"]["kind_stated"] == 1.0
    answer = extractive_choice(
        question="quanto é o desconto do vale-transporte?",
        queries=["desconto vale-transporte"],
        passages=[PAGE],
        language="pt",
    )
    assert "6%" in answer.lines[0].text


def test_a_page_that_says_no_searched_word_is_no_candidate() -> None:
    other = Passage(2, "Férias", "", "As férias são de trinta dias corridos.", document="f")
    candidates = _candidates("desconto do vale-transporte", (PAGE, other))
    far = [c for c in candidates if c["document"] == "f"]
    assert far and all(c["score"] == 0.0 and not c["relevant"] for c in far)


def test_another_model_can_be_tried_without_writing_the_file() -> None:
    """The fitting script scores whole answers with candidate weights: `using_line_model`."""
    shipped = line_model()
    meta_lover = model_from({"weights": {"meta": 5.0}, "bias": 0.0})
    with using_line_model(meta_lover):
        assert line_model() is meta_lover
        candidates = _candidates("vale-transporte comitê política")
    assert line_model() is shipped
    best = max(candidates, key=lambda c: c["score"])
    assert best["features"]["meta"] == 1.0


@pytest.mark.parametrize("temperature", [1.0, 4.0])
def test_scores_compare_as_ratios(temperature: float) -> None:
    model = model_from({"weights": {"own_line": 2.0}, "bias": 0.0, "temperature": temperature})
    low, high = model.score({"own_line": 0.0}), model.score({"own_line": 1.0})
    assert high / low == pytest.approx(2.718281828 ** (2.0 / temperature))


def test_a_silent_line_scores_below_one_that_says_the_question() -> None:
    """Under a title that holds the question's words, a line that says none of them scores
    below the line that says them."""
    title = "Décimo terceiro salário — parcelas e adiantamento nas férias"
    page = Passage(
        1,
        title,
        "",
        "O colaborador pode receber a primeira parcela junto com as férias, desde que "
        "solicite até 31 de janeiro.\n\nO informe fica disponível no portal em dezembro.",
        document="13",
        language="pt",
    )
    lines = extractive._lines(page, 0, "pt")
    terms = extractive._question_terms("13º dá pra adiantar nas férias?", [], None, "pt")
    idf = extractive._idf(lines, None, 0, "pt")
    scores = extractive._scores(
        lines, terms, idf, "condition", {id(page): extractive._stems(title, "pt")}
    )
    silent = next(line for line in lines if line.text.startswith("O informe"))
    saying = next(line for line in lines if "junto com as férias" in line.text)
    assert 0 < scores[id(silent)] < scores[id(saying)]


def test_the_lines_kept_follow_the_fitted_share_of_the_best() -> None:
    """`keep` is fitted with the weights: a line under that share of its page's best line's
    score is left out."""
    shipped = line_model()
    question = "quanto é o desconto do vale-transporte?"

    def quoted(keep: float) -> int:
        model = model_from(
            {
                "weights": dict(shipped.weights),
                "bias": shipped.bias,
                "means": dict(shipped.means),
                "scales": dict(shipped.scales),
                "temperature": shipped.temperature,
                "keep": keep,
            }
        )
        with using_line_model(model):
            answer = extractive_choice(
                question=question, queries=[question], passages=[PAGE], language="pt"
            )
        return len(answer.lines)

    assert quoted(0.999) == 1
    assert quoted(0.0) > 1


def _unit(*values: float) -> tuple[float, ...]:
    norm = sum(v * v for v in values) ** 0.5
    return tuple(v / norm for v in values)


def test_a_page_in_another_language_is_read_by_its_lines_meaning() -> None:
    """An English question shares no word with a Portuguese page's lines: with stored line
    vectors, those lines are candidates all the same, weighed by their meaning; on a page in
    the question's own language a line no searched word leads to stays out."""
    lost = "Perda ou roubo: bloqueie no aplicativo do banco e avise em até 24 horas."
    other = "O crédito é feito no cartão no penúltimo dia útil do mês."
    vectors = ((lost, _unit(1.0, 0.1, 0.0)), (other, _unit(0.1, 1.0, 0.0)))
    question = "how do I report a lost card?"
    queries = {question: _unit(1.0, 0.0, 0.0)}

    def candidates(language: str) -> list[Candidate]:
        page = Passage(
            1, "Cartão corporativo", "", f"{lost}\n{other}", document="cartao",
            language=language, line_vectors=vectors,
        )  # fmt: skip
        seen: list[Candidate] = []
        with record_candidates(seen.extend):
            extractive_choice(
                question=question,
                queries=[question],
                passages=[page],
                language="en",
                query_vectors=queries,
            )
        return seen

    across = {c["text"]: c for c in candidates("pt")}
    assert across[lost]["relevant"] and across[lost]["score"] > across[other]["score"]
    same = {c["text"]: c for c in candidates("en")}
    assert not same[lost]["relevant"] and same[lost]["score"] == 0.0
