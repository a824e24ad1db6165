"""Replace personal data by placeholders before text leaves the process.

Before a user's question and the last messages of a conversation are sent to
a model server or stored in a trace, personal data is swapped for numbered
placeholders such as ``[EMAIL_1]`` or ``[CPF_2]``.  A :class:`Masker` lives for
one turn: the same value always gets the same placeholder across every text of
that turn, and :meth:`Masker.unmask` restores the originals (e.g. in the final
answer shown to the user).  The placeholder -> original mapping lives only in
memory; nothing here logs, stores or prints it.

Detectors are deliberately conservative (false positives hurt search):
numbers are only masked when they carry valid check digits (CPF, CNPJ, DNI,
NIE, IBAN, payment cards, Chilean RUT, Mexican RFC and CURP), an explicit
context or a phone-like shape.  The context is a label that announces an
identifier ("matrícula 1234567", "número de empleado A12345", "employee number
…", "NSS …"): what follows it is masked whatever its length (issue 38).  The
labels are per-language data (``identifier_labels`` in
``retrieval/pipeline/languages/<lang>.json``, every language at once).
Names are the configured ``known_names`` and the capitalised words after an
introduction ("sou a Mariana Teixeira", "me llamo Martín", "a colaboradora
Débora Kuhn", "my name is Ana"); there is no named-entity recognition.

All regular expressions are written so that matching stays linear in the
length of the input (no nested unbounded quantifiers that can backtrack into
each other, and starts anchored by look-behinds).

Pure module: no I/O, no Django.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from stdnum import iban, luhn
from stdnum.br import cnpj, cpf
from stdnum.cl import rut
from stdnum.es import dni, nie
from stdnum.mx import curp, rfc

from .languages import identifier_labels as language_identifier_labels

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_EMPLOYEE_ID_PATTERN",
    "KINDS",
    "Kind",
    "Masker",
    "MaskingConfig",
    "PLACEHOLDER_PATTERN",
    "placeholder",
    "split_unfinished_placeholder",
]

Kind = Literal[
    "EMAIL",
    "PHONE",
    "CPF",
    "CNPJ",
    "RUT",
    "RFC",
    "CURP",
    "RG",
    "CI",
    "DNI",
    "IBAN",
    "CARD",
    "EMPLOYEE_ID",
    "ID",
    "MONEY",
    "NAME",
]

#: Every placeholder kind, in the order used to resolve overlapping matches:
#: when two detections overlap, the kind listed first wins (then the longer
#: match, then the earlier one).
KINDS: Final[tuple[Kind, ...]] = (
    "EMAIL",
    "IBAN",
    "CNPJ",
    "CPF",
    "CURP",
    "RFC",
    "RUT",
    "CARD",
    "DNI",
    "RG",
    "CI",
    "EMPLOYEE_ID",
    "ID",
    "MONEY",
    "PHONE",
    "NAME",
)
_RANK: Final[dict[str, int]] = {kind: rank for rank, kind in enumerate(KINDS)}

#: The brief's pattern, plus the capitalised spellings that open a sentence. It does not
#: stop before a "-8" or ".5" that continues the number (it left "-8" of "1234567-8" in
#: clear): such a number is masked whole by its label (issue 38).
DEFAULT_EMPLOYEE_ID_PATTERN: Final[str] = (
    r"\b(?:MAT|mat|Mat|matr[ií]cula|Matr[ií]cula|MATR[IÍ]CULA)[\s:#-]*\d{4,8}"
    r"(?![\w])(?![.,/-][0-9])"
)


@dataclass(frozen=True, repr=False)
class MaskingConfig:
    """What to mask.  Immutable; safe to share between turns.

    ``employee_id_pattern`` is a regular expression for employee registration
    numbers (``None`` disables it).  The whole match is masked unless the
    pattern has a group named ``value``, in which case only that group is.
    ``known_names`` are names of the user and of known people, each matched as
    whole words, case- and accent-insensitively; a first name must be given
    as its own entry to be masked on its own.
    """

    employee_id_pattern: str | None = DEFAULT_EMPLOYEE_ID_PATTERN
    known_names: tuple[str, ...] = ()
    mask_money: bool = True
    #: Labels that announce an identifier; None: every language file's.
    identifier_labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # Accept any iterable of names (e.g. a list) but store a tuple so the
        # config stays hashable.
        object.__setattr__(self, "known_names", tuple(self.known_names))
        if self.identifier_labels is not None:
            object.__setattr__(self, "identifier_labels", tuple(self.identifier_labels))
        if self.employee_id_pattern is not None:
            try:
                re.compile(self.employee_id_pattern)
            except re.error as exc:
                raise ValueError(f"invalid employee_id_pattern: {exc}") from None

    def __repr__(self) -> str:
        # Known names are personal data: show how many, never which.
        return (
            f"MaskingConfig(employee_id_pattern={self.employee_id_pattern!r}, "
            f"known_names=<{len(self.known_names)} names>, "
            f"mask_money={self.mask_money!r})"
        )


DEFAULT_CONFIG: Final[MaskingConfig] = MaskingConfig()


class _Hit(NamedTuple):
    start: int
    end: int
    kind: Kind
    key: str  # normalised value: equal keys share a placeholder


_Detector = Callable[[str], Iterable[_Hit]]

# --------------------------------------------------------------------------
# Placeholders
# --------------------------------------------------------------------------

# The one definition of a placeholder's format: "[" KIND "_" N "]", N counting from 1 per kind
# within a turn. The tokenizer (`text`), the answer's stream and the masker itself read it here.


def placeholder(kind: str, number: int) -> str:
    """Return the placeholder of the `number`th value of `kind` in a turn ("[EMAIL_1]")."""
    return f"[{kind}_{number}]"


def _placeholder_pattern(kind: str) -> str:
    return r"\[(?:" + kind + r")_[0-9]+\]"


#: Any placeholder, of a kind known today or not (a regular expression, not compiled).
PLACEHOLDER_PATTERN: Final = _placeholder_pattern(r"[A-Z][A-Z_]*")
# Placeholders of the kinds this masker writes (the longest kind first).
_PLACEHOLDER_RE: Final = re.compile(
    _placeholder_pattern("|".join(sorted(KINDS, key=len, reverse=True)))
)
# Longer than any placeholder ("[EMPLOYEE_ID_" and ten digits): a "[" run past it is text.
_PLACEHOLDER_MAX_CHARS: Final = 24


def split_unfinished_placeholder(text: str) -> tuple[str, str]:
    """Hold back a trailing "[" run that may be the start of a placeholder like [EMAIL_1].

    A streamed answer is unmasked piece by piece; a placeholder split over two pieces must
    wait for its end.
    """
    start = text.rfind("[")
    if start == -1 or "]" in text[start:] or len(text) - start > _PLACEHOLDER_MAX_CHARS:
        return text, ""
    return text[:start], text[start:]


# --------------------------------------------------------------------------
# Shared boundaries
# --------------------------------------------------------------------------

# A number must not be glued to a word or be the tail of a longer number
# ("1.529.982.247-25", "x12345678Z").
_NUM_START: Final[str] = r"(?<![\w])(?<![0-9][.,/-])"
# ... and must not continue into a longer number.
_NUM_END: Final[str] = r"(?![\w])(?![.,/-][0-9])"
_SEPARATORS: Final[str] = " -."


# Characters that stand for an ASCII digit, dash, separator or fullwidth sign, folded to it
# one for one: the detectors read the folded text, so "５２９.９８２.２４７-２５", "٥٢٩٩٨٢٢٤٧٢٥",
# "529.982.247–25" (a phone's or a word processor's dash) or "(11) 98765‑4321" are a CPF and
# a phone number too. Before, they went unmasked into the trace and to the model. Positions
# do not move, so what is replaced is the text as written.
_DASHES: Final = frozenset("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d")


class _LookAlikes(dict[int, int]):
    """A `str.translate` table filled as characters are first seen."""

    def __missing__(self, code: int) -> int:
        char = chr(code)
        folded = code
        if code >= 0x80:
            digit = unicodedata.decimal(char, None)
            if digit is not None:
                folded = ord("0") + digit
            elif char in _DASHES:
                folded = ord("-")
            elif 0xFF01 <= code <= 0xFF5E:  # fullwidth forms of ASCII
                folded = code - 0xFEE0
            elif unicodedata.category(char) == "Zs":  # no-break and thin spaces
                folded = ord(" ")
        self[code] = folded
        return folded


_LOOK_ALIKES: Final = _LookAlikes()


def _right_ok(text: str, end: int) -> bool:
    """Python version of ``_NUM_END`` for candidates cut shorter in code."""
    if end >= len(text):
        return True
    nxt = text[end]
    if nxt.isalnum() or nxt == "_":
        return False
    return not (nxt in ".,/-" and end + 1 < len(text) and text[end + 1].isdigit())


def _cut_points(raw: str) -> Iterator[int]:
    """Candidate lengths of a loose match: its full length, then every point
    just before a separator, longest first."""
    yield len(raw)
    for i in range(len(raw) - 1, 0, -1):
        if raw[i] in _SEPARATORS and raw[i - 1] not in _SEPARATORS:
            yield i


def _digits(value: str) -> str:
    return "".join(ch for ch in value if "0" <= ch <= "9")


# --------------------------------------------------------------------------
# Check digits
# --------------------------------------------------------------------------


def _cpf_valid(digits: str) -> bool:
    # A run of one digit ("111.111.111-11") passes the check but is a form's placeholder.
    return len(digits) == 11 and digits.isascii() and len(set(digits)) > 1 and cpf.is_valid(digits)


def _cnpj_valid(value: str) -> bool:
    """Numeric CNPJ, and the alphanumeric one issued from July 2026 (python-stdnum checks
    both)."""
    return len(value) == 14 and value.isascii() and len(set(value)) > 1 and cnpj.is_valid(value)


def _dni_valid(value: str) -> bool:
    """Spanish DNI (8 digits + letter) or NIE (X/Y/Z + 7 digits + letter)."""
    value = value.upper()
    return len(value) == 9 and value.isascii() and (dni.is_valid(value) or nie.is_valid(value))


def _iban_valid(value: str) -> bool:
    """``value`` is upper-case with no spaces. The country's length and the IBAN's own
    check digits; not the national account check inside it: a typo there is still
    somebody's account number."""
    return (
        15 <= len(value) <= 34
        and value.isascii()
        and value.isalnum()
        and iban.is_valid(value, check_country=False)
    )


def _luhn_valid(digits: str) -> bool:
    return digits.isascii() and digits.isdigit() and len(set(digits)) > 1 and luhn.is_valid(digits)


# --------------------------------------------------------------------------
# Detectors
# --------------------------------------------------------------------------

# Local part: the RFC 5322 "atext" characters plus dots.  The look-behind
# means a match can only start at the beginning of a run of such characters,
# so a long run without "@" is scanned once, not once per position.
_LOCAL_CHARS: Final[str] = r"A-Za-z0-9.!#$%&'*+/=?^_`{|}~-"
_EMAIL_RE: Final = re.compile(
    rf"(?<![{_LOCAL_CHARS}])[{_LOCAL_CHARS}]+"
    r"@(?:[A-Za-z0-9-]+\.)+[A-Za-z][A-Za-z0-9-]*[A-Za-z0-9](?![A-Za-z0-9-])"
)


_EMAIL_OPENERS: Final[str] = "'`{|"


def _detect_emails(text: str) -> Iterator[_Hit]:
    for m in _EMAIL_RE.finditer(text):
        start, value = m.start(), m.group()
        # Quotes/braces hugging an address ('joao@x.com') are not part of it.
        local = value[: value.index("@")]
        stripped = local.lstrip(_EMAIL_OPENERS)
        if stripped:
            start += len(local) - len(stripped)
        yield _Hit(start, m.end(), "EMAIL", text[start : m.end()].lower())


_IBAN_RE: Final = re.compile(r"(?<![\w])[A-Za-z]{2}[0-9]{2}(?:[ ]?[A-Za-z0-9]){11,30}")


def _detect_ibans(text: str) -> Iterator[_Hit]:
    for m in _IBAN_RE.finditer(text):
        raw = m.group()
        for size in _cut_points(raw):
            if not _right_ok(text, m.start() + size):
                continue
            compact = raw[:size].replace(" ", "").upper()
            if _iban_valid(compact):
                yield _Hit(m.start(), m.start() + size, "IBAN", compact)
                break


_CPF_RE: Final = re.compile(_NUM_START + r"[0-9]{3}\.?[0-9]{3}\.?[0-9]{3}-?[0-9]{2}" + _NUM_END)
_CNPJ_RE: Final = re.compile(
    _NUM_START + r"[0-9A-Z]{2}\.?[0-9A-Z]{3}\.?[0-9A-Z]{3}/?[0-9A-Z]{4}-?[0-9]{2}" + _NUM_END
)


def _detect_cpfs(text: str) -> Iterator[_Hit]:
    for m in _CPF_RE.finditer(text):
        digits = _digits(m.group())
        if _cpf_valid(digits):
            yield _Hit(m.start(), m.end(), "CPF", digits)


def _detect_cnpjs(text: str) -> Iterator[_Hit]:
    for m in _CNPJ_RE.finditer(text):
        value = re.sub(r"[./-]", "", m.group())
        if _cnpj_valid(value):
            yield _Hit(m.start(), m.end(), "CNPJ", value)


# Contiguous 13-19 digits, or the printed groupings (4-4-4-4[-3], 4-6-5/4).
_CARD_RE: Final = re.compile(
    r"(?<![\w+])(?<![0-9][.,/-])"
    r"(?:[0-9]{13,19}(?![0-9])"
    r"|[0-9]{4}(?:[ -][0-9]{4}){2}(?:[ -][0-9]{1,4}){1,2}"
    r"|[0-9]{4}[ -][0-9]{6}[ -][0-9]{4,5})"
)


def _detect_cards(text: str) -> Iterator[_Hit]:
    for m in _CARD_RE.finditer(text):
        raw = m.group()
        for size in _cut_points(raw):
            digits = _digits(raw[:size])
            if len(digits) < 13:
                break
            if (
                len(digits) <= 19
                and digits[0] in "23456"
                and _right_ok(text, m.start() + size)
                and _luhn_valid(digits)
            ):
                yield _Hit(m.start(), m.start() + size, "CARD", digits)
                break


_DNI_RE: Final = re.compile(
    r"(?<![\w])(?<![0-9][.,/-])"
    r"(?:[0-9]{8}|[0-9]{2}\.[0-9]{3}\.[0-9]{3}|[XYZxyz]-?[0-9]{7})-?[A-Za-z](?![\w])"
)


def _detect_dnis(text: str) -> Iterator[_Hit]:
    for m in _DNI_RE.finditer(text):
        value = re.sub(r"[.-]", "", m.group()).upper()
        if _dni_valid(value):
            yield _Hit(m.start(), m.end(), "DNI", value)


# Brazilian RG: only with an explicit label; only the number is masked.
_RG_RE: Final = re.compile(
    r"(?<![\w])(?i:rg|r\.g\.|identidade)"
    r"(?:[ \t]*(?i:n[º°o]\.?|n[úu]mero|num\.?))?[ \t]*[:#]?[ \t]*"
    r"(?P<value>[0-9]{1,3}(?:\.?[0-9]{3}){1,3}(?:-?[0-9Xx])?)" + _NUM_END
)


def _detect_rgs(text: str) -> Iterator[_Hit]:
    for m in _RG_RE.finditer(text):
        value = re.sub(r"[.-]", "", m.group("value")).upper()
        yield _Hit(m.start("value"), m.end("value"), "RG", value)


# Uruguayan cédula de identidad: seven digits and a check digit. Masked after its label
# ("CI 4.381.226-7", "cédula 50271132"), or without one in its own written form, which no
# amount or date takes ("1.234.567-8"). The check digit is not required: a mistyped
# cédula is still someone's.
_CI_RE: Final = re.compile(
    r"(?<![\w])(?:CI|C\.I\.|(?i:c[ée]dula)(?:[ \t]+(?i:de[ \t]+identidad))?)"
    r"(?:[ \t]*(?i:n[º°o]\.?|n[úu]mero|nro\.?))?[ \t]*[:#]?[ \t]*"
    r"(?P<value>[0-9]\.?[0-9]{3}\.?[0-9]{3}-?[0-9])"
    + _NUM_END
    + r"|"
    + _NUM_START
    + r"(?P<written>[0-9]\.[0-9]{3}\.[0-9]{3}-[0-9])"
    + _NUM_END
)


def _detect_cis(text: str) -> Iterator[_Hit]:
    for m in _CI_RE.finditer(text):
        group = "value" if m.group("value") else "written"
        value = re.sub(r"[.-]", "", m.group(group))
        yield _Hit(m.start(group), m.end(group), "CI", value)


# Chilean RUT/RUN, written with its check digit after a dash ("12.345.678-5", "7654321-K");
# the check digit must hold (python-stdnum).
_RUT_RE: Final = re.compile(_NUM_START + r"[0-9]{1,2}\.?[0-9]{3}\.?[0-9]{3}-[0-9Kk](?![\w])")


def _detect_ruts(text: str) -> Iterator[_Hit]:
    for m in _RUT_RE.finditer(text):
        value = re.sub(r"[.-]", "", m.group()).upper()
        if value.isascii() and rut.is_valid(value):
            yield _Hit(m.start(), m.end(), "RUT", value)


# Mexican RFC (3-4 letters, a date, a 3-character check) and CURP (18 characters): their
# dates and check characters must hold (python-stdnum); either case, as people type them.
_RFC_RE: Final = re.compile(r"(?<![\w])[A-Za-zÑñ&]{3,4}-?[0-9]{6}-?[A-Za-z0-9]{3}(?![\w])")
_CURP_RE: Final = re.compile(
    r"(?<![\w])[A-Za-z]{4}[0-9]{6}[HMXhmx][A-Za-z]{5}[0-9A-Za-z][0-9](?![\w])"
)


def _stdnum_valid(module: object, value: str) -> bool:
    try:
        return bool(module.is_valid(value))  # type: ignore[attr-defined]
    except Exception:  # python-stdnum raises on some odd input instead of saying no
        return False


def _detect_rfcs(text: str) -> Iterator[_Hit]:
    for m in _RFC_RE.finditer(text):
        value = m.group().replace("-", "").upper()
        if _stdnum_valid(rfc, value):
            yield _Hit(m.start(), m.end(), "RFC", value)


def _detect_curps(text: str) -> Iterator[_Hit]:
    for m in _CURP_RE.finditer(text):
        value = m.group().upper()
        if value.isascii() and _stdnum_valid(curp, value):
            yield _Hit(m.start(), m.end(), "CURP", value)


# What may stand between a label and its value: "nº", "number", "es", ":", "#"... (a few).
# Words are whole words ("e" is not the start of "emp-0042"); "nº" and signs need no space.
_LABEL_JOINERS: Final[str] = (
    r"(?:nro|num|numero|number|no|n|es|is|e|do|da|de|del)(?:\.|(?![\w]))|n[º°]\.?|[:#=-]"
)
# The value: letters (a prefix) then a digit, then letters and digits, maybe grouped by
# ".", "/" or "-": "1234567", "A12345", "12.345.678-5". Each group begins with its own
# separator, so a match is found in one pass.
_LABELLED_VALUE: Final[str] = r"[A-Za-z]{0,4}-?[0-9][0-9A-Za-z]*(?:[./-][0-9A-Za-z]+)*"


def _labelled_detector(labels: Sequence[str]) -> _Detector | None:
    """An identifier announced by its label, whatever its length: only the value is masked.

    Labels are matched on the folded text (case and accents aside, one character per
    character, so spans line up), each a whole word.
    """
    keys = sorted({_name_key(label) for label in labels if label.strip()}, key=len, reverse=True)
    if not keys:
        return None
    alternatives = "|".join(r"\s+".join(map(re.escape, key.split(" "))) for key in keys)
    regex = re.compile(
        r"(?<![\w])(?:" + alternatives + r")"
        r"(?:[ \t]*(?:" + _LABEL_JOINERS + r")){0,3}[ \t]*"
        r"(?P<value>" + _LABELLED_VALUE + r")" + _NUM_END
    )

    def detect(text: str) -> Iterator[_Hit]:
        for m in regex.finditer(_fold(text)):
            value = text[m.start("value") : m.end("value")]
            key = re.sub(r"[./-]", "", value).upper()
            yield _Hit(m.start("value"), m.end("value"), "ID", key)

    return detect


_PHONE_RE: Final = re.compile(
    r"""
    (?<![\w+(])(?<![0-9][.,/-])
    (?:
        # International, E.164 style: +CC then digits, optionally grouped by
        # single spaces / dots / hyphens or an area code in parentheses.
        (?P<intl>\+[1-9](?:[ .-]?(?:\([0-9]{1,4}\)|[0-9])){7,16})
      | (?P<local>
          # Brazil: (11) 98765-4321, (11) 3456-7890
          \([1-9]{2}\)[ ]?(?:9[ ]?[0-9]{4}|[2-5][0-9]{3})[ -]?[0-9]{4}
          # Brazil: 11 98765-4321, 11 3456-7890
        | [1-9]{2}[ -](?:9[0-9]{4}|[2-5][0-9]{3})[ -][0-9]{4}
          # Brazil: 5511987654321, 11987654321, 1134567890
        | (?:55)?[1-9]{2}(?:9[0-9]{8}|[2-5][0-9]{7})
          # Brazil, local mobile: 98765-4321
        | 9[0-9]{4}-[0-9]{4}
          # Spain: 612 345 678, 612345678, 91 234 56 78
        | [6-9][0-9]{2}[ ]?[0-9]{3}[ ]?[0-9]{3}
        | [89][0-9][ ][0-9]{3}[ ][0-9]{2}[ ][0-9]{2}
        )
        (?![\w])(?![.,/-][0-9])
    )
    """,
    re.VERBOSE,
)


def _phone_key(digits: str, international: bool) -> str:
    # The same number with and without its country code shares a placeholder.
    if digits.startswith("55") and len(digits) in (12, 13):
        return digits[2:]
    if international and digits.startswith("34") and len(digits) == 11:
        return digits[2:]
    return digits


def _detect_phones(text: str) -> Iterator[_Hit]:
    for m in _PHONE_RE.finditer(text):
        if m.group("local") is not None:
            digits = _digits(m.group())
            yield _Hit(m.start(), m.end(), "PHONE", _phone_key(digits, False))
            continue
        raw = m.group()
        for size in _cut_points(raw):
            digits = _digits(raw[:size])
            if len(digits) < 8:
                break
            if len(digits) <= 15 and _right_ok(text, m.start() + size):
                yield _Hit(m.start(), m.start() + size, "PHONE", _phone_key(digits, True))
                break


# Money: an amount with an explicit currency before or after it.
_AMOUNT: Final[str] = (
    r"(?:[0-9]{1,3}(?:[.,\u00a0\u202f ][0-9]{3})+(?:[.,][0-9]{1,2})?"
    r"|[0-9]+(?:[.,][0-9]{1,2})?)"
    r"(?![0-9])"
    r"(?:[ ]?(?i:mil|milh[õo]es|milh[ãa]o|mill[óo]n|millones|bilh[õo]es|k)(?![\w]))?"
)
_CURRENCY_CODES: Final[str] = r"(?:BRL|EUR|USD|GBP|MXN|CLP|ARS|COP|PEN|UYU)(?![A-Za-z])"
_MONEY_RE: Final = re.compile(
    r"(?<![\w$])(?P<pre>R\$|US\$|U\$|\$U|\$|€|£|" + _CURRENCY_CODES + r")"
    r"[ \u00a0]?(?P<amount>" + _AMOUNT + r")"
    # The second look-behind stops a run like "1 000 000 ..." from being
    # rescanned from every group (quadratic).
    r"|(?<![\w.,])(?<![0-9][ \u00a0\u202f])"
    r"(?P<amount2>" + _AMOUNT + r")[ \u00a0]?"
    r"(?P<post>€|R\$|" + _CURRENCY_CODES + r"|"
    r"(?i:reais|real|euros?|d[óo]lar(?:es)?|dollars?|pesos?|libras?)(?![\w]))"
)
_CURRENCY_CANON: Final[dict[str, str]] = {
    "r$": "BRL", "reais": "BRL", "real": "BRL", "brl": "BRL",
    "€": "EUR", "euro": "EUR", "euros": "EUR", "eur": "EUR",
    "$u": "UYU", "us$": "USD", "u$": "USD", "usd": "USD", "dolar": "USD", "dólar": "USD",
    "dolares": "USD", "dólares": "USD", "dollar": "USD", "dollars": "USD",
    "£": "GBP", "gbp": "GBP", "libra": "GBP", "libras": "GBP",
    "peso": "PESO", "pesos": "PESO",
}  # fmt: skip


def _amount_key(amount: str) -> str:
    """Canonical amount: '1.234,50' and '1234,5' -> '1234.5'; '1.500' -> '1500'."""
    match = re.match(r"[0-9.,\u00a0\u202f ]+", amount)
    number = match.group() if match else amount
    scale = amount[len(number) :].strip().lower()
    number = number.strip()
    last_sep = max(number.rfind("."), number.rfind(","))
    if last_sep != -1 and len(number) - last_sep - 1 in (1, 2):
        whole, frac = _digits(number[:last_sep]), number[last_sep + 1 :]
        frac = frac.rstrip("0")
    else:
        whole, frac = _digits(number), ""
    whole = whole.lstrip("0") or "0"
    return f"{whole}.{frac}{scale}" if frac else f"{whole}{scale}"


def _detect_money(text: str) -> Iterator[_Hit]:
    for m in _MONEY_RE.finditer(text):
        currency = m.group("pre") or m.group("post") or ""
        amount = m.group("amount") or m.group("amount2") or ""
        canon = _CURRENCY_CANON.get(currency.lower(), currency.upper())
        yield _Hit(m.start(), m.end(), "MONEY", f"{canon}|{_amount_key(amount)}")


def _employee_detector(pattern: str) -> _Detector:
    regex = re.compile(pattern)
    has_value = "value" in regex.groupindex

    def detect(text: str) -> Iterator[_Hit]:
        for m in regex.finditer(text):
            start, end = m.span("value") if has_value else m.span()
            if start < 0 or end <= start:
                continue
            value = text[start:end]
            key = _digits(value) or " ".join(value.casefold().split())
            yield _Hit(start, end, "EMPLOYEE_ID", key)

    return detect


# --------------------------------------------------------------------------
# Names: case- and accent-insensitive whole-word matching of known names.
# --------------------------------------------------------------------------

_COMBINING: Final[str] = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"


def _fold_char(ch: str) -> str:
    """One character in, one out: lower-case, without its diacritics."""
    decomposed = unicodedata.normalize("NFD", ch)
    base = decomposed[0]
    if len(decomposed) > 1 and not all(unicodedata.combining(mark) for mark in decomposed[1:]):
        base = ch  # e.g. Hangul syllables: not "letter + accents"
    lower = base.lower()
    return lower if len(lower) == 1 else base


def _fold(text: str) -> str:
    cache: dict[str, str] = {}
    out: list[str] = []
    for ch in text:
        folded = cache.get(ch)
        if folded is None:
            folded = cache[ch] = _fold_char(ch)
        out.append(folded)
    return "".join(out)


def _name_key(name: str) -> str:
    folded = _fold(name)
    kept = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return " ".join(kept.split())


def _name_detector(names: Sequence[str]) -> _Detector | None:
    keys = sorted(
        {key for key in map(_name_key, names) if len(key.replace(" ", "")) >= 2},
        key=len,
        reverse=True,
    )
    if not keys:
        return None
    marks = f"[{_COMBINING}]*"
    alternatives = [
        r"\s+".join("".join(re.escape(ch) + marks for ch in part) for part in key.split(" "))
        for key in keys
    ]
    regex = re.compile(r"(?<![\w])(?:" + "|".join(alternatives) + r")(?![\w])")

    def detect(text: str) -> Iterator[_Hit]:
        # _fold keeps one character per character, so spans line up.
        folded = _fold(text)
        for m in regex.finditer(folded):
            yield _Hit(m.start(), m.end(), "NAME", _name_key(m.group()))

    return detect


# A person introduced by name ("sou a Mariana Teixeira", "me llamo Martín Olivera", "a
# colaboradora Débora Kuhn", "my name is Ana"): the capitalised words after the cue. The
# cue is needed: a capitalised word alone is as often a place or a policy as a person.
_CAPITALISED = r"[A-ZÀ-ÖØ-Þ][a-zà-öø-ÿ]+(?:['’-][A-Za-zÀ-ÖØ-öø-ÿ]+)?"
_PARTICLE = r"(?:d[aeo]s?|de\s+la|del|van|von|y|e)"
_INTRO_RE: Final = re.compile(
    r"(?i:(?<![\w])(?:sou\s+[oa]|sou|me\s+chamo|meu\s+nome\s+[ée]|soy|me\s+llamo|"
    r"mi\s+nombre\s+es|my\s+name\s+is|i\s+am|i'm|"
    r"(?:[oa]\s+)?(?:colaborador|colaboradora|funcion[áa]ri[oa]|estagi[áa]ri[oa]|"
    r"compa[ñn]er[oa]|colega|empleado|empleada|gestor|gestora|jefe|jefa|"
    r"sr\.?|sra\.?|colleague|employee|manager))\s+)"
    r"(" + _CAPITALISED + r"(?:\s+(?:" + _PARTICLE + r"\s+)?" + _CAPITALISED + r"){0,3})"
)


def _detect_introduced_names(text: str) -> Iterator[_Hit]:
    for match in _INTRO_RE.finditer(text):
        yield _Hit(match.start(1), match.end(1), "NAME", _name_key(match.group(1)))


# --------------------------------------------------------------------------
# The masker
# --------------------------------------------------------------------------


def _build_detectors(config: MaskingConfig) -> tuple[_Detector, ...]:
    detectors: list[_Detector] = [
        _detect_emails,
        _detect_ibans,
        _detect_cnpjs,
        _detect_cpfs,
        _detect_ruts,
        _detect_rfcs,
        _detect_curps,
        _detect_cards,
        _detect_dnis,
        _detect_rgs,
        _detect_cis,
        _detect_phones,
    ]
    if config.employee_id_pattern is not None:
        detectors.append(_employee_detector(config.employee_id_pattern))
    labelled = _labelled_detector(
        language_identifier_labels()
        if config.identifier_labels is None
        else config.identifier_labels
    )
    if labelled is not None:
        detectors.append(labelled)
    if config.mask_money:
        detectors.append(_detect_money)
    names = _name_detector(config.known_names)
    if names is not None:
        detectors.append(names)
    detectors.append(_detect_introduced_names)
    return tuple(detectors)


@dataclass(eq=False, repr=False)
class Masker:
    """Masks the texts of ONE turn.

    Stateful: the same value always gets the same placeholder across all the
    texts masked by this instance, so create a new one per turn.  Originals
    are kept in memory only and never appear in ``repr``.
    """

    config: MaskingConfig = DEFAULT_CONFIG
    _detectors: tuple[_Detector, ...] = field(init=False, default=())
    _by_value: dict[tuple[Kind, str], str] = field(init=False, default_factory=dict)
    _originals: dict[str, str] = field(init=False, default_factory=dict)
    _last_number: dict[Kind, int] = field(init=False, default_factory=dict)
    # Placeholder-shaped text that was already in an input and is not ours:
    # never hand out that exact placeholder, so unmask leaves it alone.
    _foreign: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._detectors = _build_detectors(self.config)

    def __repr__(self) -> str:
        return f"Masker(counts={self.counts!r})"

    @property
    def counts(self) -> dict[str, int]:
        """Kind -> number of distinct values masked so far (no values)."""
        counts: dict[str, int] = {}
        for kind, _key in self._by_value:
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def mask(self, text: str) -> str:
        """Return ``text`` with personal data replaced by placeholders.

        Idempotent: placeholders already in the text are left alone, and the
        result of ``mask`` is not changed by masking it again.
        """
        for m in _PLACEHOLDER_RE.finditer(text):
            if m.group() not in self._originals:
                self._foreign.add(m.group())
        # Replacing a value by a placeholder changes what its neighbours see
        # (e.g. a word boundary), which may expose a new match; repeat until
        # nothing changes so that masking twice equals masking once.  Each
        # round turns at least one unmasked character into a placeholder, so
        # this ends; in practice it is one or two rounds.
        while True:
            hits = self._find(text)
            if not hits:
                return text
            text = self._replace(text, hits)

    def unmask(self, text: str) -> str:
        """Put back the originals of this masker's placeholders in ``text``.

        A value seen in several spellings (e.g. a CPF with and without
        punctuation) comes back in the spelling seen first.  Placeholders this
        masker did not hand out are left as they are.
        """
        originals = self._originals
        if not originals:
            return text
        return _PLACEHOLDER_RE.sub(lambda m: originals.get(m.group(), m.group()), text)

    def _find(self, text: str) -> list[_Hit]:
        taken = bytearray(len(text))
        for m in _PLACEHOLDER_RE.finditer(text):
            taken[m.start() : m.end()] = b"\x01" * (m.end() - m.start())
        probe = text if text.isascii() else text.translate(_LOOK_ALIKES)
        hits = [hit for detect in self._detectors for hit in detect(probe)]
        hits.sort(key=lambda h: (_RANK[h.kind], h.start - h.end, h.start))
        accepted: list[_Hit] = []
        for hit in hits:
            if hit.end <= hit.start or taken.find(1, hit.start, hit.end) != -1:
                continue
            taken[hit.start : hit.end] = b"\x01" * (hit.end - hit.start)
            accepted.append(hit)
        accepted.sort(key=lambda h: h.start)
        return accepted

    def _replace(self, text: str, hits: list[_Hit]) -> str:
        parts: list[str] = []
        pos = 0
        for hit in hits:
            parts.append(text[pos : hit.start])
            parts.append(self._placeholder(hit, text[hit.start : hit.end]))
            pos = hit.end
        parts.append(text[pos:])
        return "".join(parts)

    def _placeholder(self, hit: _Hit, original: str) -> str:
        written = self._by_value.get((hit.kind, hit.key))
        if written is None:
            number = self._last_number.get(hit.kind, 0)
            while True:
                number += 1
                written = placeholder(hit.kind, number)
                if written not in self._foreign:
                    break
            self._last_number[hit.kind] = number
            self._by_value[(hit.kind, hit.key)] = written
            self._originals[written] = original
        return written
