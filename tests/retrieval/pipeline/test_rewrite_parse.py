"""Defensive parsing of rewrite replies: repairs, validation, limits, errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval.pipeline.rewrite_parse import (
    LLM_QUERY_TYPES,
    REWRITE_SCHEMA,
    ParsedRewrite,
    RewriteParseError,
    parse_rewrite_output,
    rewrite_schema,
)
from retrieval.pipeline.types import Clarification, SearchQuery

GOOD = (
    '{"queries": [{"text": "Como funciona o reembolso para PJ?", "type": "normalize", '
    '"area": "Financeiro"}], "needs_clarification": false, "clarification": null}'
)
EXPECTED_GOOD = ParsedRewrite(
    queries=[
        SearchQuery(text="Como funciona o reembolso para PJ?", type="normalize", area="Financeiro")
    ]
)


def parse(raw: str, max_queries: int = 3, max_query_chars: int = 300) -> ParsedRewrite:
    return parse_rewrite_output(raw, max_queries=max_queries, max_query_chars=max_query_chars)


def texts(raw: str, **limits: int) -> list[str]:
    return [q.text for q in parse(raw, **limits).queries]


def test_schema_is_strict_mode_compatible() -> None:
    # OpenAI strict mode: every property required, no additional properties, at each level.
    assert set(REWRITE_SCHEMA["required"]) == set(REWRITE_SCHEMA["properties"])
    assert REWRITE_SCHEMA["additionalProperties"] is False
    item = REWRITE_SCHEMA["properties"]["queries"]["items"]
    assert set(item["required"]) == set(item["properties"])
    assert item["additionalProperties"] is False
    assert item["properties"]["type"]["enum"] == list(LLM_QUERY_TYPES)
    assert "original" not in LLM_QUERY_TYPES
    json.dumps(REWRITE_SCHEMA)


def test_the_schema_sent_bounds_the_queries_and_changes_nothing_else() -> None:
    schema = rewrite_schema(2)
    assert schema["properties"]["queries"]["maxItems"] == 2
    assert "maxItems" not in REWRITE_SCHEMA["properties"]["queries"]
    schema["properties"]["queries"].pop("maxItems")
    assert schema == REWRITE_SCHEMA


def test_parses_clean_json() -> None:
    assert parse(GOOD) == EXPECTED_GOOD


@pytest.mark.parametrize(
    "raw",
    [
        f"```json\n{GOOD}\n```",
        f"```\n{GOOD}\n```",
        f"Here is the JSON:\n{GOOD}",
        f"Claro! Aqui está o JSON pedido:\n\n```json\n{GOOD}\n```\nEspero ter ajudado.",
        f"<think>The user asks about {{PJ}}... [maybe]</think>\n{GOOD}",
        f"Placeholders like [EMAIL_1] stay. {GOOD}",
        f'{GOOD}\n{{"queries": [{{"text": "second object is ignored"}}]}}',
    ],
)
def test_strips_fences_prefixes_and_takes_the_first_json_object(raw: str) -> None:
    assert parse(raw) == EXPECTED_GOOD


@pytest.mark.parametrize(
    "raw",
    [
        # trailing commas
        '{"queries": [{"text": "Como funciona o reembolso para PJ?", "type": "normalize",'
        ' "area": "Financeiro",},], "needs_clarification": false,}',
        # single quotes and Python literals
        "{'queries': [{'text': 'Como funciona o reembolso para PJ?', 'type': 'normalize', "
        "'area': 'Financeiro'}], 'needs_clarification': False, 'clarification': None}",
        # unquoted keys
        '{queries: [{text: "Como funciona o reembolso para PJ?", type: "normalize", '
        'area: "Financeiro"}], needs_clarification: false, clarification: null}',
        # an unescaped newline inside a string
        '{"queries": [{"text": "Como funciona o reembolso\npara PJ?", "type": "normalize", '
        '"area": "Financeiro"}], "needs_clarification": false}',
    ],
    ids=["trailing-commas", "python-literals", "unquoted-keys", "raw-newline"],
)
def test_repairs_common_breakage(raw: str) -> None:
    assert parse(raw) == EXPECTED_GOOD


def test_single_quoted_strings_keep_inner_double_quotes_and_escapes() -> None:
    raw = """{'queries': [{'text': 'o que é "day off"? it\\'s ok', 'type': 'expand'}]}"""
    assert texts(raw) == ['o que é "day off"? it\'s ok']


def test_an_object_with_reply_keys_wins_over_an_earlier_unrelated_one() -> None:
    raw = 'Plan: {"step": 1, "note": "resolve PJ"}\nAnswer: {"queries": ["reembolso PJ"]}'
    assert texts(raw) == ["reembolso PJ"]
    # Without any reply key, the first object is taken and reported precisely.
    with pytest.raises(RewriteParseError, match="no 'queries'"):
        parse('{"step": 1} {"other": 2}')


def test_bare_list_of_strings_becomes_multi_query() -> None:
    result = parse('["reembolso PJ", "despesas de viagem prestador"]')
    assert result.queries == [
        SearchQuery(text="reembolso PJ", type="multi_query"),
        SearchQuery(text="despesas de viagem prestador", type="multi_query"),
    ]
    assert not result.needs_clarification


def test_strings_instead_of_query_objects_are_accepted() -> None:
    result = parse('{"queries": ["férias CLT", "férias estagiário"], "needs_clarification": false}')
    assert [(q.text, q.type) for q in result.queries] == [
        ("férias CLT", "multi_query"),
        ("férias estagiário", "multi_query"),
    ]


def test_single_query_string_is_a_normalized_query() -> None:
    assert parse('{"queries": "férias CLT"}').queries == [
        SearchQuery(text="férias CLT", type="normalize")
    ]


def test_unknown_or_missing_type_becomes_normalize() -> None:
    raw = json.dumps(
        {
            "queries": [
                {"text": "a b", "type": "paraphrase"},
                {"text": "c d"},
                {"text": "e f", "type": "original"},
                {"text": "g h", "type": "Multi-Query"},
                {"text": "i j", "type": 3},
            ]
        }
    )
    result = parse(raw, max_queries=5)
    assert [q.type for q in result.queries] == [
        "normalize",
        "normalize",
        "normalize",
        "multi_query",
        "normalize",
    ]


def test_hyde_queries_keep_their_type() -> None:
    raw = json.dumps(
        {
            "queries": [
                {"text": "reembolso PJ", "type": "normalize", "area": None},
                {"text": "Prestadores PJ são reembolsados via nota.", "type": "hyde"},
            ]
        }
    )
    assert [q.type for q in parse(raw).queries] == ["normalize", "hyde"]


def test_area_is_cleaned_and_null_like_values_dropped() -> None:
    raw = json.dumps(
        {
            "queries": [
                {"text": "a1", "type": "normalize", "area": "  RH "},
                {"text": "a2", "type": "normalize", "area": "null"},
                {"text": "a3", "type": "normalize", "area": 7},
                {"text": "a4", "type": "normalize", "area": ""},
            ]
        }
    )
    assert [q.area for q in parse(raw, max_queries=4).queries] == ["RH", None, None, None]


def test_invalid_items_and_empty_queries_are_dropped() -> None:
    raw = json.dumps(
        {
            "queries": [
                {"text": "  "},
                {"text": None},
                {"text": 42},
                17,
                None,
                {"text": "?!"},
                {"text": "  vale   refeição\n no home office "},
            ]
        }
    )
    assert texts(raw) == ["vale refeição no home office"]


def test_long_query_is_truncated_at_a_word_boundary() -> None:
    raw = json.dumps({"queries": [{"text": "reembolso de despesas de viagem internacional"}]})
    assert texts(raw, max_query_chars=30) == ["reembolso de despesas de"]
    assert texts(raw, max_query_chars=24) == ["reembolso de despesas de"]
    # A single word longer than the limit is cut hard rather than dropped.
    assert texts('["supercalifragilistic"]', max_query_chars=5) == ["super"]


def test_placeholders_are_kept_verbatim() -> None:
    raw = json.dumps({"queries": [{"text": "reembolso enviado por [EMAIL_1] ao [PERSON_2]"}]})
    assert texts(raw) == ["reembolso enviado por [EMAIL_1] ao [PERSON_2]"]


def test_duplicates_are_removed_case_and_accent_insensitively() -> None:
    raw = json.dumps(
        {
            "queries": [
                {"text": "Férias de CLT", "type": "normalize"},
                {"text": "ferias de clt?", "type": "expand"},
                {"text": "FÉRIAS  DE  CLT", "type": "multi_query"},
                {"text": "férias de estagiário", "type": "multi_query"},
            ]
        }
    )
    assert [(q.text, q.type) for q in parse(raw).queries] == [
        ("Férias de CLT", "normalize"),
        ("férias de estagiário", "multi_query"),
    ]


def test_queries_are_capped_at_max_queries_in_order() -> None:
    raw = json.dumps([f"pergunta {i}" for i in range(10)])
    assert texts(raw, max_queries=2) == ["pergunta 0", "pergunta 1"]


def test_clarification_is_parsed_when_needed() -> None:
    raw = json.dumps(
        {
            "queries": [],
            "needs_clarification": True,
            "clarification": {
                "question": "Você é CLT ou PJ?",
                "options": ["CLT", "PJ", "clt", "", 3, "Estagiário"],
            },
        }
    )
    result = parse(raw)
    assert result == ParsedRewrite(
        queries=[],
        needs_clarification=True,
        clarification=Clarification(
            question="Você é CLT ou PJ?", options=("CLT", "PJ", "Estagiário")
        ),
    )


def test_clarification_may_be_a_plain_string_and_the_flag_a_string() -> None:
    raw = '{"queries": ["férias"], "needs_clarification": "true", "clarification": "De quem?"}'
    result = parse(raw)
    assert result.needs_clarification
    assert result.clarification == Clarification(question="De quem?")
    assert [q.text for q in result.queries] == ["férias"]


def test_clarification_without_the_flag_is_ignored() -> None:
    raw = json.dumps(
        {
            "queries": ["férias"],
            "needs_clarification": False,
            "clarification": {"question": "?", "options": []},
        }
    )
    result = parse(raw)
    assert not result.needs_clarification
    assert result.clarification is None


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty output"),
        ("   \n ", "empty output"),
        ("I cannot help with that.", "no JSON object"),
        ('{"queries": [{"text": "cut', "no valid JSON object (unbalanced or malformed)"),
        ("{this is: not, json at all}", "no valid JSON object (unbalanced or malformed)"),
        ('{"answer": "30 dias"}', "JSON object has no 'queries'"),
        ('{"queries": {"text": "a"}}', "'queries' is dict, not a list"),
        ('{"queries": []}', "no queries given"),
        ('{"queries": ["", "  ", 5]}', "no usable queries (2 empty, 1 not a string or object)"),
        ('{"queries": [{"text": 1}]}', "no usable queries (1 text not a string)"),
        (
            '{"queries": [], "needs_clarification": true, "clarification": null}',
            "needs_clarification is true but no clarification question given",
        ),
        (
            '{"queries": ["a"], "needs_clarification": true, '
            '"clarification": {"question": " ", "options": ["x"]}}',
            "needs_clarification is true but no clarification question given",
        ),
        ('<think>{"queries": ["only in thoughts"]}', "no JSON object"),
        ("[" * 5000 + "]" * 5000, "no valid JSON object (unbalanced or malformed)"),
    ],
)
def test_unusable_output_raises_with_a_precise_reason(raw: str, reason: str) -> None:
    with pytest.raises(RewriteParseError) as info:
        parse(raw)
    assert info.value.reason == reason
    assert str(info.value) == reason


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        parse_rewrite_output(GOOD, max_queries=0, max_query_chars=10)


_json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    raw=st.text(max_size=300),
    max_queries=st.integers(1, 5),
    max_query_chars=st.integers(1, 50),
)
def test_arbitrary_text_only_ever_raises_rewrite_parse_error(
    raw: str, max_queries: int, max_query_chars: int
) -> None:
    try:
        result = parse(raw, max_queries=max_queries, max_query_chars=max_query_chars)
    except RewriteParseError:
        return
    _check_invariants(result, max_queries, max_query_chars)


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(["queries", "needs_clarification", "clarification", "query", "x"]),
        _json_values,
    )
    | st.lists(_json_values, max_size=5),
    prefix=st.sampled_from(["", "Here is the JSON: ", "```json\n", "[EMAIL_1] "]),
    max_queries=st.integers(1, 5),
    max_query_chars=st.integers(1, 50),
)
def test_arbitrary_json_only_ever_raises_rewrite_parse_error(
    data: object, prefix: str, max_queries: int, max_query_chars: int
) -> None:
    raw = prefix + json.dumps(data)
    try:
        result = parse(raw, max_queries=max_queries, max_query_chars=max_query_chars)
    except RewriteParseError:
        return
    _check_invariants(result, max_queries, max_query_chars)


def _check_invariants(result: ParsedRewrite, max_queries: int, max_query_chars: int) -> None:
    assert len(result.queries) <= max_queries
    assert result.queries or result.needs_clarification
    assert not result.needs_clarification or result.clarification is not None
    for query in result.queries:
        assert 0 < len(query.text) <= max_query_chars
        assert query.text == query.text.strip()
        assert query.type in LLM_QUERY_TYPES
