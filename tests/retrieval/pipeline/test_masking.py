"""Tests for retrieval.pipeline.masking (they are the spec)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from retrieval.pipeline.masking import (
    DEFAULT_CONFIG,
    DEFAULT_EMPLOYEE_ID_PATTERN,
    KINDS,
    PLACEHOLDER_PATTERN,
    Masker,
    MaskingConfig,
    placeholder,
    split_unfinished_placeholder,
)

PLACEHOLDER = re.compile(r"\[([A-Z_]+)_(\d+)\]")
NAMES = MaskingConfig(known_names=("Maria Silva", "João", "Ana Paula Souza"))

# --------------------------------------------------------------------------
# Independent generators of valid identifiers (not the module's own code).
# --------------------------------------------------------------------------


def cpf_from(base9: str) -> str:
    digits = [int(c) for c in base9]
    for weight_start in (10, 11):
        total = sum(d * w for d, w in zip(digits, range(weight_start, 1, -1), strict=True))
        digits.append(0 if total % 11 < 2 else 11 - total % 11)
    return "".join(map(str, digits))


def fmt_cpf(cpf: str) -> str:
    return f"{cpf[:3]}.{cpf[3:6]}.{cpf[6:9]}-{cpf[9:]}"


def cnpj_from(base12: str) -> str:
    values = [ord(c) - 48 for c in base12]
    out = base12
    for weights in ((5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2), (6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2)):
        total = sum(v * w for v, w in zip(values, weights, strict=True))
        dv = 0 if total % 11 < 2 else 11 - total % 11
        values.append(dv)
        out += str(dv)
    return out


def fmt_cnpj(cnpj: str) -> str:
    return f"{cnpj[:2]}.{cnpj[2:5]}.{cnpj[5:8]}/{cnpj[8:12]}-{cnpj[12:]}"


def dni_from(number: int) -> str:
    return f"{number:08d}" + "TRWAGMYFPDXBNJZSQVHLCKE"[number % 23]


def nie_from(prefix: str, number: int) -> str:
    value = int("XYZ".index(prefix) * 10_000_000 + number)
    return f"{prefix}{number:07d}" + "TRWAGMYFPDXBNJZSQVHLCKE"[value % 23]


def iban_from(country: str, bban: str) -> str:
    as_digits = "".join(str(int(c, 36)) for c in bban + country + "00")
    check = 98 - int(as_digits) % 97
    return f"{country}{check:02d}{bban}"


def group4(value: str, sep: str = " ") -> str:
    return sep.join(value[i : i + 4] for i in range(0, len(value), 4))


def luhn_from(partial: str) -> str:
    """Append the Luhn check digit to ``partial``."""
    total = 0
    for i, c in enumerate(reversed(partial)):
        d = int(c)
        if i % 2 == 0:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return partial + str((10 - total % 10) % 10)


def masked_kinds(text: str) -> list[str]:
    return [m.group(1) for m in PLACEHOLDER.finditer(text)]


def mask_one(text: str, config: MaskingConfig = DEFAULT_CONFIG) -> str:
    return Masker(config).mask(text)


def test_generators_agree_with_known_examples() -> None:
    assert fmt_cpf(cpf_from("529982247")) == "529.982.247-25"
    assert fmt_cnpj(cnpj_from("112223330001")) == "11.222.333/0001-81"
    assert cnpj_from("12ABC34501DE") == "12ABC34501DE35"
    assert dni_from(12345678) == "12345678Z"
    assert nie_from("X", 1234567) == "X1234567L"
    assert iban_from("ES", "21000418450200051332") == "ES9121000418450200051332"
    assert luhn_from("411111111111111") == "4111111111111111"


# --------------------------------------------------------------------------
# CPF
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["meu CPF é 529.982.247-25", "meu CPF é 52998224725", "CPF:529.982.247-25."],
)
def test_valid_cpf_is_masked(text: str) -> None:
    out = mask_one(text)
    assert "[CPF_1]" in out
    assert "529" not in out


@pytest.mark.parametrize(
    "text",
    [
        "CPF 529.982.247-26",
        "CPF 529.982.247-35",
        "CPF 111.111.111-11",
        "CPF 000.000.000-00",
        "CPF 123.456.789-00",
    ],
)
def test_invalid_or_repeated_cpf_is_not_a_cpf_but_its_label_masks_it(text: str) -> None:
    # Issue 38: a number after an identifier's label is one, whatever its check digits.
    assert mask_one(text) == "CPF [ID_1]"
    bare = text.split(" ", 1)[1]
    assert mask_one(bare) == bare


def test_invalid_bare_cpf_is_never_a_cpf() -> None:
    assert "CPF" not in masked_kinds(mask_one("cpf 52998224726"))
    assert mask_one("cpf 11111111111") == "cpf [ID_1]"  # by its label (issue 38)
    assert mask_one("o 11111111111") == "o 11111111111"


def test_cpf_inside_a_longer_number_is_not_masked() -> None:
    for text in ["1529.982.247-25", "529.982.247-251", "529982247250", "x52998224725"]:
        assert "CPF" not in masked_kinds(mask_one(text)), text


@given(st.text(alphabet="0123456789", min_size=9, max_size=9), st.booleans())
def test_generated_cpfs_are_masked(base: str, formatted: bool) -> None:
    cpf = cpf_from(base)
    if len(set(cpf)) == 1:
        return
    shown = fmt_cpf(cpf) if formatted else cpf
    assert mask_one(f"CPF {shown} ok") == "CPF [CPF_1] ok"


@given(st.text(alphabet="0123456789", min_size=9, max_size=9), st.integers(1, 9))
def test_cpfs_with_a_wrong_check_digit_are_not_cpfs(base: str, delta: int) -> None:
    cpf = cpf_from(base)
    wrong = cpf[:10] + str((int(cpf[10]) + delta) % 10)
    assert mask_one(f"o {fmt_cpf(wrong)} ok") == f"o {fmt_cpf(wrong)} ok"
    assert mask_one(f"CPF {fmt_cpf(wrong)} ok") == "CPF [ID_1] ok"  # by its label


def test_cpf_with_and_without_punctuation_share_a_placeholder() -> None:
    masker = Masker()
    assert masker.mask("529.982.247-25 / 52998224725") == "[CPF_1] / [CPF_1]"
    assert masker.counts == {"CPF": 1}


@pytest.mark.parametrize(
    "written",
    [
        "５２９.９８２.２４７-２５",  # fullwidth digits (an East Asian keyboard, a copy from a PDF)
        "５２９．９８２．２４７－２５",  # fullwidth punctuation too
        "٥٢٩٩٨٢٢٤٧٢٥",  # Arabic-Indic digits
        "𝟓𝟐𝟗.𝟗𝟖𝟐.𝟐𝟒𝟕-𝟐𝟓",  # mathematical bold digits
        "529.982.247–25",  # an en dash (what phones and word processors turn "-" into)
        "529.982.247‑25",  # a non-breaking hyphen
    ],
)
def test_a_cpf_written_with_look_alike_characters_is_masked(written: str) -> None:
    """The attack: these reached the trace (the staff's pages) and the model as typed."""
    masker = Masker()
    masked = masker.mask(f"meu cpf é {written} e o do meu filho 529.982.247-25")
    assert masked == "meu cpf é [CPF_1] e o do meu filho [CPF_1]"
    assert masker.unmask("[CPF_1]") == written


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("ligue (11) 98765–4321", "PHONE"),
        ("ligue (11)\u00a098765-4321", "PHONE"),
        ("ｊｏａｏ.ｓｉｌｖａ＠ｅｘｅｍｐｌｏ.ｃｏｍ", "EMAIL"),
        ("CNPJ １１.２２２.３３３/０００１-８１", "CNPJ"),
    ],
)
def test_other_data_written_with_look_alike_characters_is_masked(text: str, kind: str) -> None:
    masked = Masker().mask(text)
    assert f"[{kind}_1]" in masked, masked


def test_look_alike_characters_elsewhere_are_left_as_written() -> None:
    text = "férias – 30 dias ２０２６ ﬁm"
    assert Masker().mask(text) == text


# --------------------------------------------------------------------------
# CNPJ
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "CNPJ 11.222.333/0001-81",
        "CNPJ 11222333000181",
        "CNPJ 12.ABC.345/01DE-35",  # alphanumeric CNPJ (from July 2026)
    ],
)
def test_valid_cnpj_is_masked(text: str) -> None:
    assert mask_one(text) == "CNPJ [CNPJ_1]"


@pytest.mark.parametrize(
    "text",
    [
        "CNPJ 11.222.333/0001-82",
        "CNPJ 11.222.333/0001-91",
        "CNPJ 00.000.000/0000-00",
        "CNPJ 11.111.111/1111-11",
        "CNPJ 12.ABC.345/01DE-36",
    ],
)
def test_invalid_or_repeated_cnpj_is_not_a_cnpj_but_its_label_masks_it(text: str) -> None:
    assert mask_one(text) == "CNPJ [ID_1]"
    bare = text.split(" ", 1)[1]
    assert mask_one(bare) == bare


@given(st.text(alphabet="0123456789", min_size=12, max_size=12), st.booleans())
def test_generated_cnpjs_are_masked(base: str, formatted: bool) -> None:
    cnpj = cnpj_from(base)
    if len(set(cnpj)) == 1:
        return
    shown = fmt_cnpj(cnpj) if formatted else cnpj
    assert mask_one(f"empresa {shown}.") == "empresa [CNPJ_1]."


@given(st.text(alphabet="0123456789", min_size=12, max_size=12), st.integers(1, 9))
def test_cnpjs_with_a_wrong_check_digit_are_not_masked(base: str, delta: int) -> None:
    cnpj = cnpj_from(base)
    wrong = fmt_cnpj(cnpj[:13] + str((int(cnpj[13]) + delta) % 10))
    assert mask_one(f"empresa {wrong}.") == f"empresa {wrong}."


# --------------------------------------------------------------------------
# Spanish DNI / NIE
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["DNI 12345678Z", "DNI 12345678-Z", "DNI 12345678z", "NIE X1234567L", "NIE Y1234567X"],
)
def test_valid_dni_and_nie_are_masked(text: str) -> None:
    assert mask_one(text).endswith("[DNI_1]")


@pytest.mark.parametrize(
    "text",
    ["12345678A", "X1234567A", "Z1234567L", "código 12345678Zeta", "A12345678Z"],
)
def test_dni_and_nie_with_wrong_letter_are_not_masked(text: str) -> None:
    assert mask_one(text) == text


@pytest.mark.parametrize("text", ["DNI 12345678A", "NIE X1234567A", "NIE Z1234567L"])
def test_dni_and_nie_with_wrong_letter_are_masked_by_their_label(text: str) -> None:
    assert mask_one(text).endswith(" [ID_1]")


@given(st.integers(0, 99_999_999))
def test_generated_dnis_are_masked(number: int) -> None:
    assert mask_one(f"mi DNI es {dni_from(number)}.") == "mi DNI es [DNI_1]."


@given(st.sampled_from("XYZ"), st.integers(0, 9_999_999))
def test_generated_nies_are_masked(prefix: str, number: int) -> None:
    assert mask_one(f"NIE {nie_from(prefix, number)}") == "NIE [DNI_1]"


@given(st.integers(0, 99_999_999), st.integers(1, 22))
def test_dnis_with_a_wrong_letter_are_not_masked(number: int, delta: int) -> None:
    letters = "TRWAGMYFPDXBNJZSQVHLCKE"
    wrong = f"{number:08d}{letters[(number + delta) % 23]}"
    assert mask_one(f"el {wrong}") == f"el {wrong}"
    assert mask_one(f"DNI {wrong}") == "DNI [ID_1]"


def test_dni_and_nie_share_one_numbering() -> None:
    masker = Masker()
    out = masker.mask("12345678Z, X1234567L, 12345678z")
    assert out == "[DNI_1], [DNI_2], [DNI_1]"


# --------------------------------------------------------------------------
# IBAN
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "iban",
    [
        "ES91 2100 0418 4502 0005 1332",
        "ES9121000418450200051332",
        "es91 2100 0418 4502 0005 1332",
        "DE89 3704 0044 0532 0130 00",
        "GB82 WEST 1234 5698 7654 32",
        "PT50 0002 0123 1234 5678 9015 4",
        "BR18 0036 0305 0000 1000 9795 493C 1",
    ],
)
def test_valid_iban_is_masked(iban: str) -> None:
    assert mask_one(f"IBAN: {iban} para la nómina") == "IBAN: [IBAN_1] para la nómina"


@pytest.mark.parametrize(
    "iban",
    [
        "ES92 2100 0418 4502 0005 1332",
        "ES91 2100 0418 4502 0005 1333",
        "ES91 2100 0418 4502 0005 133",  # wrong length for ES
        "XX00 0000 0000 0000",
    ],
)
def test_invalid_iban_is_not_masked(iban: str) -> None:
    assert "IBAN" not in masked_kinds(mask_one(f"IBAN {iban}"))


@given(
    st.sampled_from(["ES", "FR", "PT", "DE", "IT"]),
    st.text(alphabet="0123456789", min_size=30, max_size=30),
    st.booleans(),
)
def test_generated_ibans_are_masked(country: str, digits: str, spaced: bool) -> None:
    length = {"ES": 24, "FR": 27, "PT": 25, "DE": 22, "IT": 27}[country]
    bban = digits[: length - 4]
    if country == "IT":
        bban = "X" + bban[1:]  # an Italian account opens with its CIN letter
    iban = iban_from(country, bban)
    shown = group4(iban) if spaced else iban
    assert mask_one(f"cuenta {shown}, gracias") == "cuenta [IBAN_1], gracias"


def test_iban_spaced_and_compact_share_a_placeholder() -> None:
    masker = Masker()
    out = masker.mask("ES91 2100 0418 4502 0005 1332 = es9121000418450200051332")
    assert out == "[IBAN_1] = [IBAN_1]"


# --------------------------------------------------------------------------
# Payment cards
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "card",
    [
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "4111111111111111",
        "5555 5555 5555 4444",
        "3782 822463 10005",
        "6011111111111117",
    ],
)
def test_luhn_valid_card_is_masked(card: str) -> None:
    assert mask_one(f"cartão {card} venc 12/27") == "cartão [CARD_1] venc 12/27"


@pytest.mark.parametrize(
    "card",
    [
        "4111 1111 1111 1112",
        "4111111111111112",
        "0000 0000 0000 0000",
        "1234 5678 9012 3456",
    ],
)
def test_luhn_invalid_or_repeated_card_is_not_masked(card: str) -> None:
    assert "CARD" not in masked_kinds(mask_one(f"cartão {card}"))


def test_card_followed_by_cvv_is_still_found() -> None:
    assert mask_one("4111 1111 1111 1111 123") == "[CARD_1] 123"


@given(
    st.sampled_from(["4", "51", "52", "53", "54", "55", "6011"]),
    st.text(alphabet="0123456789", min_size=15, max_size=15),
    st.sampled_from(["", " ", "-"]),
)
def test_generated_cards_are_masked(prefix: str, body: str, sep: str) -> None:
    card = luhn_from((prefix + body)[:15])
    if len(set(card)) == 1:
        return
    assert mask_one(f"card {group4(card, sep)} please") == "card [CARD_1] please"


@given(st.text(alphabet="0123456789", min_size=15, max_size=15), st.integers(1, 9))
def test_cards_failing_luhn_are_not_cards(body: str, delta: int) -> None:
    card = luhn_from("4" + body[:14])
    wrong = card[:15] + str((int(card[15]) + delta) % 10)
    assert "CARD" not in masked_kinds(mask_one(f"card {group4(wrong)}"))


# --------------------------------------------------------------------------
# Phones
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "phone",
    [
        "+55 (11) 98765-4321",
        "+55 11 98765-4321",
        "+5511987654321",
        "(11) 98765-4321",
        "(11) 3456-7890",
        "(11)3456-7890",
        "11 98765-4321",
        "11987654321",
        "98765-4321",
        "+34 612 345 678",
        "+34612345678",
        "612 345 678",
        "912 345 678",
        "91 234 56 78",
        "+56 9 1234 5678",
        "+52 55 1234 5678",
        "+52 1 55 1234 5678",
        "+1 (415) 555-2671",
        "+44 20 7946 0958",
    ],
)
def test_phone_is_masked(phone: str) -> None:
    assert mask_one(f"ligue {phone}, obrigado") == "ligue [PHONE_1], obrigado"


@pytest.mark.parametrize(
    "text",
    [
        "15/03/2026",
        "2026-03-15",
        "12.03.2026",
        "de 2024-2025",
        "às 10:30",
        "CEP 01310-100",
        "ramal 4321",
        "em 2026",
        "processo 0001234-56.2024.5.02.0001",
        "Lei 13.467/2017",
        "versão 2.3.10",
        "ISO 27001",
        "+5",
        "+55 11",
    ],
)
def test_non_phones_are_not_masked(text: str) -> None:
    assert mask_one(text) == text


def test_phone_does_not_swallow_a_following_year() -> None:
    assert mask_one("+55 11 98765-4321 2026") == "[PHONE_1] 2026"


def test_same_phone_with_and_without_country_code_shares_a_placeholder() -> None:
    masker = Masker()
    out = masker.mask("+55 (11) 98765-4321 ou (11) 98765-4321 ou 11987654321")
    assert out == "[PHONE_1] ou [PHONE_1] ou [PHONE_1]"
    out = masker.mask("+34 612 345 678 / 612345678")
    assert out == "[PHONE_2] / [PHONE_2]"


# --------------------------------------------------------------------------
# RG
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("RG 12.345.678-9", "RG [RG_1]"),
        ("RG: 123456789", "RG: [RG_1]"),
        ("rg 12.345.678-X", "rg [RG_1]"),
        ("identidade nº 12.345.678-9", "identidade nº [RG_1]"),
        ("Carteira de identidade: 1234567", "Carteira de identidade: [RG_1]"),
        ("RG nº 12345678", "RG nº [RG_1]"),
    ],
)
def test_rg_with_context_masks_only_the_number(text: str, expected: str) -> None:
    assert mask_one(text) == expected


@pytest.mark.parametrize(
    "text", ["número 12.345.678-9", "o RG é obrigatório", "RGB 123456", "argh 1234567"]
)
def test_rg_without_context_is_not_masked(text: str) -> None:
    assert mask_one(text) == text


# --------------------------------------------------------------------------
# Employee ids
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "matrícula 123456",
        "matricula: 1234",
        "Matrícula 12345678",
        "MAT-12345",
        "mat#00123456",
        "MATRÍCULA 4321",
    ],
)
def test_default_employee_id_is_masked(text: str) -> None:
    assert mask_one(f"minha {text}.") == "minha [EMPLOYEE_ID_1]."


@pytest.mark.parametrize("text", ["matrícula 123", "matemática 2026", "MAT 123456789"])
def test_default_employee_id_needs_4_to_8_digits(text: str) -> None:
    assert "EMPLOYEE_ID" not in masked_kinds(mask_one(text))


def test_employee_id_pattern_is_configurable_and_can_be_disabled() -> None:
    custom = MaskingConfig(employee_id_pattern=r"\bE\d{5}\b", identifier_labels=())
    assert mask_one("crachá E12345", custom) == "crachá [EMPLOYEE_ID_1]"
    assert mask_one("matrícula 123456", custom) == "matrícula 123456"
    disabled = MaskingConfig(employee_id_pattern=None, identifier_labels=())
    assert mask_one("matrícula 123456", disabled) == "matrícula 123456"
    # The labels (language data) still mask it without the pattern (issue 38).
    assert mask_one("matrícula 123456", MaskingConfig(employee_id_pattern=None)) == (
        "matrícula [ID_1]"
    )


def test_employee_id_value_group_masks_only_the_number() -> None:
    config = MaskingConfig(employee_id_pattern=r"\bmatr[ií]cula\s*(?P<value>\d{4,8})\b")
    masker = Masker(config)
    assert masker.mask("matrícula 123456 / matricula 123456") == (
        "matrícula [EMPLOYEE_ID_1] / matricula [EMPLOYEE_ID_1]"
    )


def test_invalid_employee_pattern_is_rejected_up_front() -> None:
    with pytest.raises(ValueError, match="employee_id_pattern"):
        MaskingConfig(employee_id_pattern="(unclosed")


def test_default_pattern_is_exported() -> None:
    assert DEFAULT_CONFIG.employee_id_pattern == DEFAULT_EMPLOYEE_ID_PATTERN


# --------------------------------------------------------------------------
# Money
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "amount",
    [
        "R$ 1.234,56",
        "R$1200",
        "R$ 5 mil",
        "€ 1.500",
        "€1.500,00",
        "1.500 €",
        "1500 euros",
        "US$ 20",
        "$ 300",
        "$300.50",
        "1.200 reais",
        "MXN 5,000",
        "CLP 450.000",
        "5,000 MXN",
        "2 000 €",
        "300 dólares",
        "EUR 99,90",
    ],
)
def test_money_is_masked(amount: str) -> None:
    assert mask_one(f"valor: {amount}, ok") == "valor: [MONEY_1], ok"


@pytest.mark.parametrize(
    "text",
    ["40%", "30 dias", "2026", "3 parcelas", "13º salário", "1.500", "1500,00", "nota 9,5"],
)
def test_bare_numbers_and_percentages_are_not_money(text: str) -> None:
    assert mask_one(text) == text


def test_same_amount_in_different_spellings_shares_a_placeholder() -> None:
    masker = Masker()
    out = masker.mask("R$ 1.200 = R$1200 = 1.200 reais = R$ 1.200,00; € 1.500 = 1500 euros")
    assert out == "[MONEY_1] = [MONEY_1] = [MONEY_1] = [MONEY_1]; [MONEY_2] = [MONEY_2]"
    assert masker.counts == {"MONEY": 2}


def test_money_can_be_disabled() -> None:
    config = MaskingConfig(mask_money=False)
    assert mask_one("R$ 1.234,56", config) == "R$ 1.234,56"


# --------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------


def test_known_names_are_masked_case_and_accent_insensitively() -> None:
    masker = Masker(NAMES)
    out = masker.mask("Maria Silva, MARIA SILVA, maria  silva e Joao, JOÃO, joão.")
    assert out == "[NAME_1], [NAME_1], [NAME_1] e [NAME_2], [NAME_2], [NAME_2]."
    assert masker.counts == {"NAME": 2}


def test_known_names_match_decomposed_accents() -> None:
    decomposed = "Joa\u0303o"  # "João" with a combining tilde
    assert mask_one(f"oi {decomposed}!", NAMES) == "oi [NAME_1]!"


def test_names_match_whole_words_only() -> None:
    for text in ["Joãozinho", "Mariana Silva", "Maria Silvana", "SãoJoão"]:
        assert mask_one(text, NAMES) == text, text


def test_only_configured_names_are_masked() -> None:
    # "Maria" alone is not an entry, nor is "Silva"; no NER.
    text = "Maria falou com Silva e com Pedro Alves"
    assert mask_one(text, NAMES) == text


def test_first_name_as_its_own_entry() -> None:
    config = MaskingConfig(known_names=("Maria Silva", "Maria"))
    masker = Masker(config)
    assert masker.mask("Maria Silva e Maria") == "[NAME_1] e [NAME_2]"


def test_longest_known_name_wins() -> None:
    config = MaskingConfig(known_names=("Ana", "Ana Paula Souza"))
    assert mask_one("Ana Paula Souza", config) == "[NAME_1]"


def test_blank_and_one_letter_names_are_ignored() -> None:
    config = MaskingConfig(known_names=("", "  ", "A", "é"))
    text = "A casa é azul"
    assert mask_one(text, config) == text


def test_known_names_accept_a_list_and_config_stays_hashable() -> None:
    config = MaskingConfig(known_names=["João"])  # type: ignore[arg-type]
    assert config.known_names == ("João",)
    assert hash(config) == hash(MaskingConfig(known_names=("João",)))


# --------------------------------------------------------------------------
# Overlaps and priorities
# --------------------------------------------------------------------------


def test_email_wins_over_a_name_inside_it() -> None:
    config = MaskingConfig(known_names=("Maria", "Silva"))
    assert mask_one("maria.silva@empresa.com.br", config) == "[EMAIL_1]"


def test_cpf_wins_over_phone() -> None:
    # 52998224725 also has the shape of a Brazilian mobile number.
    assert mask_one("52998224725") == "[CPF_1]"


def test_card_and_iban_win_over_phone() -> None:
    assert masked_kinds(mask_one("4111111111111111")) == ["CARD"]
    assert masked_kinds(mask_one("ES9121000418450200051332")) == ["IBAN"]


def test_everything_in_one_message() -> None:
    masker = Masker(NAMES)
    text = (
        "Sou Maria Silva (maria.silva@acme.com, +55 11 98765-4321), CPF "
        "529.982.247-25, matrícula 123456, recebi R$ 1.234,56 no cartão "
        "4111 1111 1111 1111; João tem DNI 12345678Z e IBAN ES91 2100 0418 "
        "4502 0005 1332."
    )
    out = masker.mask(text)
    assert out == (
        "Sou [NAME_1] ([EMAIL_1], [PHONE_1]), CPF [CPF_1], [EMPLOYEE_ID_1], "
        "recebi [MONEY_1] no cartão [CARD_1]; [NAME_2] tem DNI [DNI_1] e IBAN "
        "[IBAN_1]."
    )
    assert masker.unmask(out) == text
    assert masker.counts == {
        "NAME": 2,
        "EMAIL": 1,
        "PHONE": 1,
        "CPF": 1,
        "EMPLOYEE_ID": 1,
        "MONEY": 1,
        "CARD": 1,
        "DNI": 1,
        "IBAN": 1,
    }


# --------------------------------------------------------------------------
# Placeholders: numbering, stability across a turn, unmask
# --------------------------------------------------------------------------


def test_email_is_masked_case_insensitively() -> None:
    masker = Masker()
    assert masker.mask("a@b.com A@B.COM c@d.org") == "[EMAIL_1] [EMAIL_1] [EMAIL_2]"


def test_numbering_is_per_kind_in_order_of_first_appearance() -> None:
    masker = Masker()
    out = masker.mask("x@a.com 529.982.247-25 y@a.com 12345678Z z@a.com")
    assert out == "[EMAIL_1] [CPF_1] [EMAIL_2] [DNI_1] [EMAIL_3]"


def mask_texts(texts: list[str], config: MaskingConfig | None = None) -> tuple[list[str], Masker]:
    """The texts of one turn masked with one shared masker, as a turn does."""
    masker = Masker(config) if config is not None else Masker()
    return [masker.mask(text) for text in texts], masker


def test_placeholders_are_stable_across_the_texts_of_a_turn() -> None:
    texts = [
        "meu email é joao@acme.com e o CPF 529.982.247-25",
        "assistant: anotei joao@acme.com",
        "e o de maria@acme.com? meu CPF continua 52998224725",
    ]
    masked, masker = mask_texts(texts)
    assert masked == [
        "meu email é [EMAIL_1] e o CPF [CPF_1]",
        "assistant: anotei [EMAIL_1]",
        "e o de [EMAIL_2]? meu CPF continua [CPF_1]",
    ]
    assert masker.counts == {"EMAIL": 2, "CPF": 1}
    assert masker.unmask("Enviei para [EMAIL_2] e [EMAIL_1].") == (
        "Enviei para maria@acme.com e joao@acme.com."
    )


def test_separate_maskers_do_not_share_state() -> None:
    first, second = Masker(), Masker()
    assert first.mask("a@b.com") == "[EMAIL_1]"
    assert second.mask("c@d.com") == "[EMAIL_1]"
    assert first.unmask("[EMAIL_1]") == "a@b.com"
    assert second.unmask("[EMAIL_1]") == "c@d.com"


def test_unmask_restores_the_first_spelling_of_a_value() -> None:
    masker = Masker()
    out = masker.mask("52998224725 e 529.982.247-25")
    assert masker.unmask(out) == "52998224725 e 52998224725"


def test_unmask_leaves_unknown_placeholders_and_plain_text_alone() -> None:
    masker = Masker()
    masker.mask("a@b.com")
    assert masker.unmask("[EMAIL_2] [PHONE_1] [EMAIL_1] [email_1]") == (
        "[EMAIL_2] [PHONE_1] a@b.com [email_1]"
    )
    assert Masker().unmask("[EMAIL_1]") == "[EMAIL_1]"


def test_placeholders_already_in_the_input_are_never_reused() -> None:
    masker = Masker()
    text = "veja [EMAIL_1] e escreva para a@b.com"
    out = masker.mask(text)
    assert out == "veja [EMAIL_1] e escreva para [EMAIL_2]"
    assert masker.unmask(out) == text


def test_masking_a_masked_text_changes_nothing() -> None:
    masker = Masker(NAMES)
    once = masker.mask("Maria Silva, a@b.com, CPF 529.982.247-25, R$ 10")
    assert masker.mask(once) == once
    assert Masker(NAMES).mask(once) == once
    assert masker.counts == {"NAME": 1, "EMAIL": 1, "CPF": 1, "MONEY": 1}


def test_one_masker_with_config_and_empty_input() -> None:
    masked, masker = mask_texts(["falei com João"], NAMES)
    assert masked == ["falei com [NAME_1]"]
    assert masker.config is NAMES
    empty, empty_masker = mask_texts([])
    assert empty == []
    assert empty_masker.counts == {}


def test_counts_only_names_kinds() -> None:
    masker = Masker()
    masker.mask("a@b.com c@d.com 529.982.247-25")
    counts = masker.counts
    assert counts == {"EMAIL": 2, "CPF": 1}
    assert set(counts) <= set(KINDS)
    counts["EMAIL"] = 99  # a copy: does not corrupt the masker
    assert masker.counts["EMAIL"] == 2


# --------------------------------------------------------------------------
# No leaks
# --------------------------------------------------------------------------


def test_repr_and_str_do_not_leak_originals() -> None:
    masker = Masker(NAMES)
    masker.mask("Maria Silva maria@acme.com 529.982.247-25 +55 11 98765-4321")
    for shown in (repr(masker), str(masker), repr(masker.config), str(NAMES)):
        for secret in ("Maria", "Silva", "maria@", "acme", "529", "98765", "João"):
            assert secret not in shown, (secret, shown)
    assert "EMAIL" in repr(masker)  # counts are fine to show
    assert "3 names" in repr(NAMES)


# --------------------------------------------------------------------------
# Things that must NOT be masked
# --------------------------------------------------------------------------

HR_QUESTIONS = [
    # pt-BR
    "quantos dias de férias no 13º?",
    "regra do VR no home em 2026",
    "aviso prévio de 30 dias",
    "art. 477 da CLT",
    "PLR de 2025 paga em 3 parcelas",
    "40% do FGTS",
    "Qual o prazo para pagar o 13º salário em 2026?",
    "Posso vender 1/3 das férias depois de 11 meses?",
    "A jornada é de 44 horas semanais ou 8h por dia?",
    "O que diz a Súmula 437 do TST sobre intervalo de 1 hora?",
    "A NR-17 vale para home office?",
    "Atestado com CID F32 abona quantos dias?",
    "Lei 13.467/2017 mudou o banco de horas de 120 horas?",
    "A CCT 2025/2026 prevê reajuste de 5,5%?",
    "Como informo meu CPF e RG no cadastro?",
    "processo 0001234-56.2024.5.02.0001 sobre horas extras",
    "Quem aprova as férias de 15/07/2026 a 30/07/2026?",
    "Ramal do RH é 4321?",
    "CEP 01310-100 é atendido pelo VT?",
    # es
    "¿Cuántos días de vacaciones tengo en 2026?",
    "artículo 38 del Estatuto de los Trabajadores",
    "¿Me retienen el 15% de IRPF en las 14 pagas?",
    "Permiso de nacimiento de 16 semanas desde el 1 de enero",
    "¿Dónde pongo mi DNI y el IBAN en el portal?",
    # en
    "How many PTO days do I get in 2026?",
    "Is the 401(k) match 6% after 90 days?",
    "Where do I find my Form W-2 for 2025?",
    "Notice period is 30 days under section 7.3 of the handbook",
    "ISO 27001 training due by 31/12/2026",
]


@pytest.mark.parametrize("question", HR_QUESTIONS)
def test_realistic_hr_questions_are_left_alone(question: str) -> None:
    masker = Masker(NAMES)
    assert masker.mask(question) == question
    assert masker.counts == {}


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=300)
# Text made of the characters the detectors care about, so they fire often.
DENSE_TEXT = st.text(
    alphabet="0123456789 .,-/()+@aeXYZRES$€%º:#[]_EMAILPHONE\nçã",
    max_size=200,
)
FRAGMENTS = [
    "joao@acme.com",
    "529.982.247-25",
    "11.222.333/0001-81",
    "12345678Z",
    "X1234567L",
    "ES91 2100 0418 4502 0005 1332",
    "4111 1111 1111 1111",
    "+55 (11) 98765-4321",
    "912 345 678",
    "RG 12.345.678-9",
    "matrícula 123456",
    "R$ 1.234,56",
    "1500 euros",
    "Maria Silva",
    "João",
    "13º salário",
    "2026",
    "art. 477 da CLT",
    "40%",
    "[EMAIL_1]",
]
DENSE_FRAGMENTS = st.lists(st.sampled_from(FRAGMENTS), unique=True, max_size=12).flatmap(
    lambda parts: st.lists(
        st.sampled_from([" ", "\n", "; ", " e ", ", "]),
        min_size=len(parts),
        max_size=len(parts),
    ).map(lambda seps: "".join(p + s for p, s in zip(parts, seps, strict=True)))
)
TEXTS = st.one_of(ANY_TEXT, DENSE_TEXT, DENSE_FRAGMENTS)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_mask_never_raises_and_returns_text(text: str) -> None:
    out = Masker(NAMES).mask(text)
    assert isinstance(out, str)


@settings(deadline=None)
@given(TEXTS)
def test_unmask_of_mask_is_the_identity(text: str) -> None:
    masker = Masker(NAMES)
    assert masker.unmask(masker.mask(text)) == text


@settings(deadline=None)
@given(TEXTS)
def test_masking_is_idempotent(text: str) -> None:
    masker = Masker(NAMES)
    once = masker.mask(text)
    counts = masker.counts
    assert masker.mask(once) == once
    assert masker.counts == counts
    assert Masker(NAMES).mask(once) == once


@settings(deadline=None)
@given(st.lists(st.one_of(ANY_TEXT, DENSE_FRAGMENTS), min_size=1, max_size=4))
def test_several_texts_round_trip_with_one_masker(texts: list[str]) -> None:
    # Placeholder-shaped input in a later text could name a value of an
    # earlier one (documented limitation), so leave those out here.
    assume("[" not in "".join(texts))
    masked, masker = mask_texts(texts, NAMES)
    assert len(masked) == len(texts)
    assert [masker.unmask(m) for m in masked] == texts


@settings(deadline=None)
@given(st.emails(), ANY_TEXT, ANY_TEXT)
def test_output_never_contains_an_input_email(email: str, before: str, after: str) -> None:
    text = f"{before} {email} {after}"
    out = Masker().mask(text)
    assert email not in out
    assert email.lower() not in out.lower()


def _opening(email: str) -> str:
    """Quote-like characters that open an address are kept outside its placeholder."""
    local = email.split("@")[0]
    rest = local.lstrip("'`{|")
    return local[: len(local) - len(rest)] if rest else ""


@settings(deadline=None)
@given(
    st.lists(
        st.emails(),
        min_size=1,
        max_size=5,
        unique_by=lambda e: e[len(_opening(e)) :].lower(),
    )
)
def test_each_distinct_email_gets_its_own_placeholder(emails: list[str]) -> None:
    masker = Masker()
    out = masker.mask(" , ".join(emails))
    expected = [f"{_opening(e)}[EMAIL_{i}]" for i, e in enumerate(emails, start=1)]
    assert out == " , ".join(expected)
    assert masker.counts == {"EMAIL": len(emails)}


def test_quotes_around_an_email_stay_outside_the_placeholder() -> None:
    masker = Masker()
    assert masker.mask("'joao@acme.com' `ana@acme.com`") == "'[EMAIL_1]' `[EMAIL_2]`"
    assert masker.mask("'@acme.com") == "[EMAIL_3]"


# --------------------------------------------------------------------------
# Size: linear-time regexes (no time assertion; a catastrophic pattern
# would simply not finish)
# --------------------------------------------------------------------------

SIZE = 100_000


@pytest.mark.parametrize(
    "text",
    [
        "a" * SIZE,
        "1" * SIZE,
        "1 " * (SIZE // 2),
        "1" + " 000" * (SIZE // 4),
        "1" + ".000" * (SIZE // 4),
        "R$ 1" + ".000" * (SIZE // 4),
        "a@" * (SIZE // 2),
        "a." * (SIZE // 2),
        "x@" + "a-" * (SIZE // 2),
        "x@" + "a." * (SIZE // 2) + "1",
        "+1 " * (SIZE // 3),
        "(11) " * (SIZE // 5),
        "ES91" + " 2100" * (SIZE // 5),
        "4111 " * (SIZE // 5),
        "RG " * (SIZE // 3),
        "MAT" + " " * SIZE,
        "maria " * (SIZE // 6),
        "[EMAIL_" * (SIZE // 7),
        "\x00\x01\n\t\u202e\ufeff" * (SIZE // 6),
        (
            "Maria Silva joao@acme.com 529.982.247-25 +55 11 98765-4321 "
            "R$ 1.234,56 12345678Z 4111 1111 1111 1111 art. 477 da CLT "
        )
        * (SIZE // 120),
    ],
    ids=lambda text: repr(text[:12]),
)
def test_large_inputs_finish(text: str) -> None:
    masker = Masker(NAMES)
    out = masker.mask(text)
    assert masker.mask(out) == out
    assert masker.unmask(out) == text


# --------------------------------------------------------------------------
# The placeholder format: one definition, read by the tokenizer and the stream.
# --------------------------------------------------------------------------


def test_every_placeholder_the_masker_writes_has_the_one_format() -> None:
    from retrieval.pipeline.text import is_placeholder, token_spans

    masker = Masker(NAMES)
    masked = masker.mask("Maria Silva, maria@empresa.com.br, CPF 529.982.247-25")
    written = PLACEHOLDER.findall(masked)
    assert len(written) == 3
    for kind, number in written:
        text = placeholder(kind, int(number))
        assert re.fullmatch(PLACEHOLDER_PATTERN, text) and is_placeholder(text)
        assert text in [t.text for t in token_spans(masked)]  # one token, not three
    assert placeholder("EMPLOYEE_ID", 12) == "[EMPLOYEE_ID_12]"


@pytest.mark.parametrize(
    ("text", "ready", "held"),
    [
        ("Fale com [EMA", "Fale com ", "[EMA"),
        ("Fale com [EMAIL_1]", "Fale com [EMAIL_1]", ""),
        ("veja [1] e [", "veja [1] e ", "["),
        ("sem colchete", "sem colchete", ""),
        ("[" + "x" * 30, "[" + "x" * 30, ""),  # longer than any placeholder: plain text
    ],
)
def test_stream_holds_back_only_what_may_become_a_placeholder(
    text: str, ready: str, held: str
) -> None:
    assert split_unfinished_placeholder(text) == (ready, held)


# --------------------------------------------------------------------------
# Uruguayan cédula (CI) and the Uruguayan peso
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mis datos: CI 4.381.226-7.", "mis datos: CI [CI_1]."),
        ("C.I. 43812267", "C.I. [CI_1]"),
        ("cédula de identidad nº 5.027.113-2", "cédula de identidad nº [CI_1]"),
        ("mi cédula es 5.027.113-2", "mi cédula es [CI_1]"),  # its written form alone
        ("Cedula: 1.234.567-8", "Cedula: [CI_1]"),
    ],
)
def test_uruguayan_cedula_is_masked_after_its_label_or_in_its_written_form(
    text: str, expected: str
) -> None:
    assert mask_one(text) == expected


@pytest.mark.parametrize(
    "text", ["el artículo 12345678", "código 1234567-8", "número 12.345.678-9", "ciudad 1.234"]
)
def test_numbers_that_are_no_cedula_are_left(text: str) -> None:
    assert mask_one(text) == text


def test_an_amount_in_uruguayan_pesos_is_money() -> None:
    masker = Masker(MaskingConfig())
    masked = masker.mask("si gano $U 62.000 por mes")
    assert masked == "si gano [MONEY_1] por mes"
    assert masker.unmask(masked) == "si gano $U 62.000 por mes"
