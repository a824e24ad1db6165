"""Identifiers the masking did not know (issue 38, finding 10).

Tried on a Brazilian-Mexican company: an employee number typed with its label (seven digits
after "matrícula", a letter-prefixed number after "número de empleado"), a Mexican RFC and
CURP were searched as typed. A number after an identifier's label is an identifier whatever
its length (labels: `identifier_labels` in retrieval/pipeline/languages/<lang>.json), and the
formats python-stdnum checks are masked by their check digits, label or not.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.pipeline.languages import identifier_labels
from retrieval.pipeline.masking import Masker, MaskingConfig


def mask(text: str, config: MaskingConfig | None = None) -> str:
    return Masker(config or MaskingConfig()).mask(text)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("minha matrícula é 1234567, posso?", "minha matrícula é [ID_1], posso?"),
        ("Matrícula nº 123456789012", "Matrícula nº [ID_1]"),
        ("matricula: 12", "matricula: [ID_1]"),
        ("mi número de empleado A12345", "mi número de empleado [ID_1]"),
        ("Número de Empleado: MX-00917", "Número de Empleado: [ID_1]"),
        ("my employee number is 4471", "my employee number is [ID_1]"),
        ("Employee ID emp-0042 asks", "Employee ID [ID_1] asks"),
        ("NSS 12345678901", "NSS [ID_1]"),
        ("legajo 8812", "legajo [ID_1]"),
        ("CTPS 1234567 série 0012", "CTPS [ID_1] série 0012"),
    ],
)
def test_a_number_after_its_label_is_masked_whatever_its_length(text: str, masked: str) -> None:
    assert mask(text) == masked


def test_employee_id_pattern_off_the_label_still_masks_a_seven_digit_matricula() -> None:
    # The attack's "matrícula" had seven digits; a deployment's own pattern may not cover it.
    config = MaskingConfig(employee_id_pattern=r"\bE\d{5}\b")
    assert mask("minha matrícula 1234567", config) == "minha matrícula [ID_1]"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("RFC GODE561231GR8 y CURP BOXW310820HNERXN09", "RFC [RFC_1] y CURP [CURP_1]"),
        ("gode561231gr8 por favor", "[RFC_1] por favor"),
        ("el BOXW310820HNERXN09 es mío", "el [CURP_1] es mío"),
        ("mi RUT es 12.345.678-5", "mi RUT es [RUT_1]"),
        ("RUN 12345678-5", "RUN [RUT_1]"),
        ("12345678-5 sin etiqueta", "[RUT_1] sin etiqueta"),
    ],
)
def test_check_digit_formats_are_masked_with_or_without_a_label(text: str, masked: str) -> None:
    assert mask(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "12.345.678-4 sin etiqueta",  # wrong RUT check digit, no label
        "GODE561331GR8",  # an RFC with no such date
        "BOXW310820HNERXN08",  # a CURP with a wrong check digit
        "a matrícula do curso é obrigatória",  # the label, no number after it
        "política de férias 2024 para 30 dias",
        "o artigo 7 da CLT",
    ],
)
def test_no_label_and_no_valid_check_digit_is_left_alone(text: str) -> None:
    assert mask(text) == text


def test_the_labels_are_language_data() -> None:
    labels = identifier_labels()
    for label in ("matrícula", "número de empleado", "employee number", "RFC", "CURP", "NSS"):
        assert label in labels
    own = MaskingConfig(identifier_labels=("código do colaborador",))
    assert mask("código do colaborador 77", own) == "código do colaborador [ID_1]"
    assert mask("número de empleado 77", own) == "número de empleado 77"


def test_one_value_keeps_one_placeholder_and_comes_back() -> None:
    masker = Masker()
    masked = masker.mask("matrícula 1234567-8 e matricula 12345678")
    assert masked == "matrícula [ID_1] e [EMPLOYEE_ID_1]"
    assert masker.unmask(masked) == "matrícula 1234567-8 e matricula 12345678"


@pytest.mark.parametrize(
    "text",
    [
        "matrícula " * 400,
        "número de " * 400 + "empleado",
        "matrícula nº nº nº " * 300 + "x",
        "matrícula " + "1." * 2000 + "x",
        "RFC " + "A" * 4000,
        "a-" * 2000,
    ],
)
def test_adversarial_labels_are_masked_in_linear_time(text: str) -> None:
    # A hang guard for a backtracking pattern, far above the few ms these take.
    start = time.perf_counter()
    mask(text)
    assert time.perf_counter() - start < 2.0


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="matrícula nº:-.0123456789AaEeRFCURPN ", max_size=400))
def test_random_label_soup_never_raises_and_masking_is_idempotent(text: str) -> None:
    masker = Masker()
    once = masker.mask(text)
    assert masker.mask(once) == once
    assert masker.unmask(once) == text
