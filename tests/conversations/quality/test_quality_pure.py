"""The pure parts of staff quality tools: glossary candidates and the chart's geometry."""

from __future__ import annotations

from conversations.quality.chart import RunValues, line_chart
from conversations.quality.review.candidates import glossary_candidates, vocabulary_words


def test_unknown_acronym_comes_first() -> None:
    df = {"funciona": 12, "ferias": 40, "regra": 30}
    assert glossary_candidates("como funciona o TRI?", df=df, glossary_terms=[]) == ["TRI"]


def test_candidates_skip_glossary_terms_stopwords_numbers_and_placeholders() -> None:
    df = {"pedir": 5, "dias": 50}
    found = glossary_candidates(
        "posso pedir VR e PLR em 2026 para [EMAIL_1] no rmeoto?",
        df=df,
        glossary_terms=["VR"],
    )
    assert found == ["PLR", "rmeoto"]


def test_rare_words_after_unknown_ones_and_limit() -> None:
    df = {"banda": 1, "creche": 0, "salario": 9}
    found = glossary_candidates("banda do auxílio creche salário", df=df, glossary_terms=[])
    assert found == ["auxílio", "creche", "banda"]
    assert len(glossary_candidates("AA BB CC DD", df={}, glossary_terms=[], limit=2)) == 2


def test_vocabulary_words_match_the_vocabulary_table() -> None:
    assert vocabulary_words("Férias do home-office [CPF_1]") == {"ferias", "home", "office"}


def test_chart_has_one_point_per_run_and_mode() -> None:
    runs = [
        RunValues(1, "#1", {"none": 0.4, "rules": 0.6}),
        RunValues(2, "#2", {"none": 0.5, "rules": 0.8}),
        RunValues(3, "#3", {"rules": 1.2}),  # clamped to the axis
    ]
    chart = line_chart(runs, metric="mrr@10", modes=["none", "rules"], current=2)
    series = {s.mode: s for s in chart.series}
    assert [p.run_id for p in series["rules"].points] == [1, 2, 3]
    assert [p.run_id for p in series["none"].points] == [1, 2]
    xs = [p.x for p in series["rules"].points]
    assert xs == sorted(xs) and xs[0] == chart.left and xs[-1] == chart.right
    ys = [p.y for p in series["rules"].points]
    assert ys[0] > ys[1] > ys[2] == chart.top  # higher is better, drawn higher
    assert [p.current for p in series["rules"].points] == [False, True, False]
    assert series["rules"].polyline.count(",") == 3
    assert [t.label for t in chart.y_ticks] == ["0.00", "0.25", "0.50", "0.75", "1.00"]


def test_single_run_and_empty_chart() -> None:
    chart = line_chart([RunValues(7, "#7", {"none": 0.5})], metric="mrr@10")
    assert chart.series[0].points[0].x == (chart.left + chart.right) / 2
    assert line_chart([], metric="mrr@10").empty
