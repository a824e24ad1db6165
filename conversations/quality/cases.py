"""Evaluation cases marked by staff, and their conversion to judged tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from conversations.quality.models import EvalCase
from retrieval.models import Collection, Document
from retrieval.pipeline.text import detect_language


@transaction.atomic
def eval_case_create(
    *,
    collection: Collection,
    question: str,
    history: Sequence[dict[str, str]],
    documents: Sequence[Document],
    category: str,
    expect_clarification: bool = False,
    note: str = "",
    source_message_id: int | None = None,
    user: User | None = None,
    history_documents: Sequence[int] = (),
) -> EvalCase:
    """Store a judged question (masked text) with the documents that answer it."""
    case = EvalCase.objects.create(
        collection=collection,
        question=question.strip(),
        history=[{"role": m["role"], "text": m["text"]} for m in history],
        history_documents=sorted(set(history_documents)),
        category=category,
        expect_clarification=expect_clarification,
        language=detect_language(question) or "",
        note=note,
        source_message_id=source_message_id,
        created_by=user,
    )
    case.relevant_documents.set(documents)
    return case


def eval_case_records(*, collection: Collection) -> list[dict[str, Any]]:
    """The active cases of a collection as task records (the `evaluate` file format).

    A case needs relevant documents, or must expect a clarification, to be scored.
    """
    records = []
    cases = EvalCase.objects.filter(collection=collection, active=True).prefetch_related(
        "relevant_documents"
    )
    for case in cases.order_by("id"):
        relevant = sorted(d.external_id for d in case.relevant_documents.all())
        if not relevant and not case.expect_clarification:
            continue
        record: dict[str, Any] = {
            "id": f"case-{case.pk}",
            "history": case.history,
            "question": case.question,
            "relevant": relevant,
            "category": case.category,
            "expect_clarification": case.expect_clarification,
        }
        if case.language:
            record["lang"] = case.language
        records.append(record)
    return records
