"""Read side of staff review: traces and conversations with their review flags, in SQL.

Flags are computed by the database (jsonb_path_exists, EXISTS subqueries), so the admin can
filter and paginate thousands of turns without loading their traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import (
    BooleanField,
    Exists,
    F,
    FloatField,
    Func,
    OuterRef,
    Q,
    QuerySet,
    Value,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from conversations.models import Conversation, Feedback, Message, TurnTrace
from conversations.quality.review.candidates import glossary_candidates, vocabulary_words
from conversations.quality.review.restricted import redactors_by_conversation
from conversations.trace import STRONG_PATH, read_trace
from retrieval.access import RESTRICTED_DOCUMENT
from retrieval.models import Document, GlossaryEntry
from retrieval.services import default_collection, scope_for_user, vocabulary_df

T = TypeVar("T", bound=TurnTrace)


class JsonbPathExists(Func):
    """jsonb_path_exists(column, constant path): the path is ours, never user input."""

    function = "jsonb_path_exists"
    template = "%(function)s(%(expressions)s::jsonpath)"
    output_field = BooleanField()


def slow_threshold_ms() -> int:
    return int(settings.CHATRAG_REVIEW_SLOW_MS)


def traces_annotated(qs: QuerySet[T]) -> QuerySet[T]:
    """Traces with `total_ms`, `thumbs_down`, `thumbs_up`, `corroborated` and `has_hits`."""
    # Feedback is given on the answer, whose reply_to is the traced user message.
    feedback = Feedback.objects.filter(message__reply_to=OuterRef("message_id"))
    annotated = qs.annotate(
        total_ms=Cast(KeyTextTransform("to_done", "timings_ms"), FloatField()),
        thumbs_down=Exists(feedback.filter(value=-1)),
        thumbs_up=Exists(feedback.filter(value=1)),
        corroborated=JsonbPathExists(F("search"), Value(STRONG_PATH)),
        has_hits=JsonbPathExists(F("search"), Value("$.hits[0]")),
    )
    return cast("QuerySet[T]", annotated)


def trace_flag_q(flag: str) -> Q:
    """The condition of one flag on an annotated trace queryset (`trace.turn_flags` in Python)."""
    conditions = {
        "anomaly": Q(anomaly=True),
        "clarified": Q(clarified=True),
        # Small talk searched nothing on purpose (`Trace.found_nothing`).
        "no_results": Q(no_results=True) & ~Q(rewrite__contains={"no_search": True}),
        "weak": Q(clarified=False, no_results=False, has_hits=True, corroborated=False),
        "not_found": Q(answer__not_found=True),
        "errors": ~Q(errors=[]),
        "slow": Q(total_ms__gt=slow_threshold_ms()),
        "thumbs_down": Q(thumbs_down=True),
        "thumbs_up": Q(thumbs_up=True),
    }
    if flag not in conditions:
        raise ValueError(f"unknown flag {flag!r}")
    return conditions[flag]


def traces_with_flag(flag: str, qs: QuerySet[T]) -> QuerySet[T]:
    return traces_annotated(qs).filter(trace_flag_q(flag))


def conversations_with_flag(
    flag: str, qs: QuerySet[Conversation] | None = None
) -> QuerySet[Conversation]:
    """Conversations with at least one turn carrying the flag."""
    qs = qs if qs is not None else Conversation.objects.all()
    flagged = traces_with_flag(flag, TurnTrace.objects.all()).filter(
        message__conversation=OuterRef("pk")
    )
    return qs.filter(Exists(flagged))


# Why a turn needs a look: nothing or only weak results, an answer that said the pages found
# don't hold it, a thumbs down, an anomaly.
ATTENTION_FLAGS = ("no_results", "weak", "not_found", "thumbs_down", "anomaly")


def attention_q() -> Q:
    """The turns that carry one of `ATTENTION_FLAGS`."""
    condition = Q(pk__in=[])
    for flag in ATTENTION_FLAGS:
        condition |= trace_flag_q(flag)
    return condition


def attention_traces(qs: QuerySet[T], *, include_reviewed: bool = False) -> QuerySet[T]:
    """Turns needing attention, newest first; reviewed ones only when asked."""
    qs = traces_annotated(qs).filter(attention_q())
    if not include_reviewed:
        qs = qs.filter(reviewed_at__isnull=True)
    return qs.select_related("message__conversation__owner").order_by("-created_at", "-id")


def glossary_candidates_for(traces: Sequence[TurnTrace], *, viewer: User) -> dict[int, list[str]]:
    """Candidate glossary terms per trace, with one vocabulary query for all of them.

    Counted over what the viewing staff member may read: whether a word is offered must not
    tell them that it appears in a document they cannot open. Taken from the question as
    they see it: a clicked option that is a title they may not read is the placeholder on
    the page, and offering its words would spell it out (issue 38, finding 3).
    """
    collection = default_collection()
    redactors = redactors_by_conversation(
        viewer=viewer, conversation_ids={t.message.conversation_id for t in traces}
    )
    hidden = str(RESTRICTED_DOCUMENT)
    questions = {}
    for trace in traces:
        redactor = redactors.get(trace.message.conversation_id)
        shown = redactor.scrub(trace.masked_question) if redactor else trace.masked_question
        if shown.replace(hidden, " ").strip():
            questions[trace.id] = shown.replace(hidden, " ")
    words: set[str] = set()
    for question in questions.values():
        words |= vocabulary_words(question)
    df = vocabulary_df(
        scope=scope_for_user(user=viewer, collection=collection), words=sorted(words)
    )
    terms = list(GlossaryEntry.objects.filter(collection=collection).values_list("term", flat=True))
    return {
        trace_id: glossary_candidates(question, df=df, glossary_terms=terms)
        for trace_id, question in questions.items()
    }


def window_documents(*, question: Message) -> list[int]:
    """The documents a turn's window was written from, by primary key (0: one that is gone).

    The sources of the answers before the turn and the hits of the turns before it (a
    clarification names hits' titles): what an evaluation case marked from the turn keeps
    beside its history, so that staff who may not read one of them see no answer of it.
    """
    earlier = Message.objects.filter(conversation_id=question.conversation_id, id__lt=question.id)
    ids: set[int] = set()
    for sources in earlier.filter(role=Message.Role.ASSISTANT).values_list("sources", flat=True):
        for source in sources if isinstance(sources, list) else []:
            document_id = source.get("document_id") if isinstance(source, dict) else None
            if isinstance(document_id, int) and not isinstance(document_id, bool):
                ids.add(document_id)
    named = {
        hit.document
        for trace in TurnTrace.objects.filter(message__in=earlier)
        for hit in read_trace(trace).search.hits
    }
    found = dict(
        Document.objects.filter(collection=default_collection(), external_id__in=named).values_list(
            "external_id", "pk"
        )
    )
    return sorted(ids | {found.get(name, 0) for name in named})
