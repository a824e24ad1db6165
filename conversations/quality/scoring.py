"""Scoring of judged tasks (pure): term and fact matching, per-task rows, summaries.

Matching follows `../shared/data/ptes-dev/README.md`: case- and accent-insensitive, hyphens
read as spaces, whitespace collapsed, then a substring test.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from retrieval.pipeline.metrics import precision_recall
from retrieval.pipeline.text import content_terms, token_spans


def match_norm(text: str) -> str:
    """The README's `norm`: NFKD, casefold, ASCII only, hyphens as spaces, one space."""
    ascii_text = unicodedata.normalize("NFKD", text.casefold()).encode("ascii", "ignore").decode()
    return " ".join(ascii_text.replace("-", " ").split())


def contains(haystack: str, needle: str) -> bool:
    """Tell whether `needle` occurs in `haystack` under `match_norm`."""
    return match_norm(needle) in match_norm(haystack)


def term_checks(
    queries: Sequence[str], expected: Iterable[str], forbidden: Iterable[str]
) -> dict[str, dict[str, bool]]:
    """Each expected term found, each forbidden term present, in all the queries together."""
    joined = " | ".join(queries)
    return {
        "expected": {term: contains(joined, term) for term in expected},
        "forbidden": {term: contains(joined, term) for term in forbidden},
    }


def fact_checks(answer: str, facts: Iterable[str]) -> dict[str, bool]:
    """Each fact found in the answer (same matching as the query terms)."""
    return {fact: contains(answer, fact) for fact in facts}


# Answer lengths at which fact recall is also measured (an answer's first N words), and the
# pages whose text bounds what any answer could say (the ceiling).
FACT_WORDS = (40, 80, 120)
CEILING_PAGES = (1, 3)
_WORD = re.compile(r"[^\W\d_][\w'’-]*|\d+(?:[.,/]\d+)*")
_CITATION = re.compile(r"\[\d+\]")


def word_count(text: str) -> int:
    """Words of an answer, citations and list markers left out."""
    return len(_WORD.findall(_CITATION.sub(" ", text)))


def first_words(text: str, n: int) -> str:
    """The answer's beginning up to its `n`-th word (counted as `word_count` counts)."""
    plain = _CITATION.sub(lambda m: " " * len(m.group()), text)  # same offsets as `text`
    for count, match in enumerate(_WORD.finditer(plain), start=1):
        if count == n:
            return text[: match.end()]
    return text


def token_recall(reference: str, answer: str, language: str | None = "en") -> float | None:
    """Share of the reference's distinct content words that the answer also has."""
    wanted = set(content_terms(reference, language))
    if not wanted:
        return None
    have = {t.norm for t in token_spans(answer)}
    return len(wanted & have) / len(wanted)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def retrieval_scores(rows: Sequence[Mapping[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """Mean recall@k, MRR@10 and nDCG@10 over the rows that have relevant documents."""
    judged = [r for r in rows if r["relevant"]]
    out: dict[str, Any] = {"n": len(judged)}
    for k in ks:
        out[f"recall@{k}"] = _mean(r[f"recall@{k}"] for r in judged)
    out["mrr@10"] = _mean(r["mrr@10"] for r in judged)
    out["ndcg@10"] = _mean(r["ndcg@10"] for r in judged)
    return out


def clarification_scores(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Precision and recall of asking back (a task expects it when `expect_clarification`)."""
    asked = [bool(r["clarified"]) for r in rows]
    expected = [bool(r["expect_clarification"]) for r in rows]
    precision, recall = precision_recall(asked, expected)
    return {
        "precision": precision,
        "recall": recall,
        "asked": sum(asked),
        "expected": sum(expected),
        "asked_and_expected": sum(a and e for a, e in zip(asked, expected, strict=True)),
    }


def no_search_scores(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Small talk left unsearched, small talk searched, searchable turns wrongly skipped."""
    small_talk = [r for r in rows if r["expect_no_search"]]
    searchable = [r for r in rows if r["relevant"]]
    skipped = sum(not r["searched"] for r in small_talk)
    return {
        "n": len(small_talk),
        "accuracy": skipped / len(small_talk) if small_talk else None,
        "small_talk_searched": len(small_talk) - skipped,
        "false_no_search": sum(not r["searched"] for r in searchable),
        "searchable": len(searchable),
    }


def term_scores(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pass rates of the two term lists: per term, and per task (every term right)."""
    out: dict[str, Any] = {}
    for kind, good in (("expected", True), ("forbidden", False)):
        checked = [r["terms"][kind] for r in rows if r["terms"][kind]]
        values = [hit == good for checks in checked for hit in checks.values()]
        out[kind] = {
            "tasks": len(checked),
            "task_pass": _mean(float(all(v == good for v in c.values())) for c in checked),
            "terms": len(values),
            "term_pass": _mean(float(v) for v in values),
        }
    return out


def answer_scores(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Answer-fact recall (whole, at 40/80/120 words, and the pages' ceiling), answer
    length, reference token recall, and "not found" against `expect_no_answer`."""
    answered = [r["answer"] for r in rows if r.get("answer") is not None]
    judged = [a for a in answered if a["facts"]]
    facts = [hit for a in judged for hit in a["facts"].values()]
    recalls = [a["token_recall"] for a in answered if a.get("token_recall") is not None]
    words = [a["words"] for a in answered if a["text"]]
    out: dict[str, Any] = {
        "n": len(judged),
        "facts": len(facts),
        "fact_recall": _mean(float(f) for f in facts),
        "task_pass": _mean(float(all(a["facts"].values())) for a in judged),
        "median_words": statistics.median(words) if words else 0,
        "token_recall": _mean(recalls) if recalls else None,
        "token_recall_n": len(recalls),
        "build_ms_p50": statistics.median(a["build_ms"] for a in answered) if answered else 0,
    }
    for key, sizes in (("facts_at", FACT_WORDS), ("ceiling", CEILING_PAGES)):
        for size in sizes:
            hits = [h for a in judged for h in a.get(key, {}).get(str(size), {}).values()]
            out[f"{key}_{size}"] = _mean(float(h) for h in hits) if hits else None
    out["not_found"] = not_found_scores(answered)
    return out


def not_found_scores(answers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How often the answer said the pages hold nothing; precision and recall of that where
    tasks expect it, and the judged facts lost to answers refused on answerable tasks."""
    said = [bool(a.get("not_found")) for a in answers]
    expected = [bool(a.get("expect_no_answer")) for a in answers]
    out: dict[str, Any] = {"said": sum(said), "expected": sum(expected)}
    if any(expected):
        precision, recall = precision_recall(said, expected)
        out["precision"], out["recall"] = precision, recall
    judged_facts = [a["facts"] for a in answers if a["facts"]]
    refused = [a["facts"] for a in answers if a["facts"] and a.get("not_found")]
    total = sum(len(f) for f in judged_facts)
    out["refused_answerable"] = len(refused)
    # A refusal states none of its task's facts: at most this share of fact recall is lost.
    out["fact_recall_at_risk"] = sum(len(f) for f in refused) / total if total else 0.0
    return out


def grouped(
    rows: Sequence[Mapping[str, Any]],
    key: str,
    score: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """`score` applied to the rows of each value of `key` (a category, a language)."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[str(row[key])].append(row)
    return {name: score(items) for name, items in sorted(groups.items())}


def not_found_table(
    answerable: Sequence[Mapping[str, Any]],
    unanswerable: Sequence[Mapping[str, Any]],
    thresholds: Sequence[float],
) -> list[dict[str, Any]]:
    """For each threshold on an answer's `coverage`: the unanswerable turns it would refuse,
    the answerable ones, the share of judged facts those hold, and the precision."""
    facts = sum(len(a["facts"]) for a in answerable)
    out = []
    for threshold in thresholds:
        caught = sum(a["coverage"] < threshold for a in unanswerable)
        refused = [a for a in answerable if a["coverage"] < threshold]
        said = caught + len(refused)
        out.append(
            {
                "threshold": threshold,
                "recall": caught / len(unanswerable) if unanswerable else 0.0,
                "refused_answerable": len(refused),
                "facts_at_risk": sum(len(a["facts"]) for a in refused) / facts if facts else 0.0,
                "precision": caught / said if said else None,
            }
        )
    return out


def not_found_threshold(
    table: Sequence[Mapping[str, Any]],
    *,
    facts_budget: float = 0.0,
    min_precision: float = 0.0,
) -> float:
    """The largest threshold whose refused answerable turns hold at most `facts_budget` of
    the judged facts and refuse none without facts beyond it (0: refuse no answerable turn),
    and whose refusals are right at least `min_precision` of the time."""
    fitting = [
        row["threshold"]
        for row in table
        if row["facts_at_risk"] <= facts_budget
        and (facts_budget > 0 or row["refused_answerable"] == 0)
        and (row["precision"] is None or row["precision"] >= min_precision)
    ]
    return max(fitting, default=0.0)
