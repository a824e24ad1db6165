"""A conversation as staff review it: each turn with its whole trace, masked.

Traces hold masked text only; everything else shown to staff (the title, the answer, the
users' feedback reasons) is masked here the same way before it reaches a template, so a
review page never shows personal data the pipeline would have hidden from a model. What
came from documents the viewing staff member may not read is a placeholder
(`conversations.quality.review.restricted`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.contrib.auth.models import User
from django.utils.translation import gettext_lazy as _

from conversations.models import Conversation, Feedback, Message, TurnTrace
from conversations.quality.review.restricted import TurnRedactor
from conversations.quality.review.selectors import slow_threshold_ms
from conversations.trace import (
    RewriteView,
    Trace,
    TraceAnswer,
    TraceMessage,
    TraceSearch,
    read_trace,
    rewrite_view,
    turn_flags,
)
from retrieval.access import RESTRICTED_DOCUMENT, RESTRICTED_PASSAGE
from retrieval.pipeline.answer import clean_citations
from retrieval.pipeline.masking import Masker, MaskingConfig
from retrieval.services import employee_id_pattern, known_names_for

FLAG_LABELS = {  # every one of `FLAGS`
    "anomaly": _("anomaly"),
    "clarified": _("clarification asked"),
    "no_results": _("no results"),
    "weak": _("weak results"),
    "not_found": _("pages did not say"),
    "errors": _("errors"),
    "slow": _("slow turn"),
    "thumbs_down": _("thumbs down"),
    "thumbs_up": _("thumbs up"),
}
PIPELINE_STAGES = ("mask", "rewrite", "embed", "search", "merge")
MILESTONES = ("to_rewrite_frame", "to_sources_frame", "to_first_delta", "to_done")


@dataclass
class FoundBy:
    query: int  # 1-based, as shown
    rank: int
    vector_rank: int | None
    text_rank: int | None
    score: float


@dataclass
class HitRow:
    position: int
    chunk: int
    document: str
    title: str
    score: float
    passage: bool
    corroborated: bool  # `TraceHit.corroborated`
    found_by: list[FoundBy]


@dataclass
class SourceRow:
    n: int
    title: str
    section: str
    document_id: int | None
    cited: bool


@dataclass
class Stage:
    name: str
    ms: float
    width: float  # percent of the longest bar


@dataclass
class FeedbackRow:
    value: int
    reason: str
    username: str


@dataclass
class TurnReview:
    question_id: int
    asked_at: datetime
    status: str
    masked_question: str
    trace_id: int | None = None
    window: list[TraceMessage] = field(default_factory=list)
    rewrite: RewriteView = field(default_factory=RewriteView)
    hits: list[HitRow] = field(default_factory=list)
    sources: list[SourceRow] = field(default_factory=list)
    answer_id: int | None = None
    answer_text: str = ""
    answer_status: str = ""
    extractive: bool = False
    answer_error: str = ""
    # Why the extractive answer quoted its lines, and whether it said "not found".
    answer_check: TraceAnswer = field(default_factory=TraceAnswer)
    stages: list[Stage] = field(default_factory=list)
    milestones: list[Stage] = field(default_factory=list)
    total_ms: float | None = None
    errors: list[str] = field(default_factory=list)
    feedback: list[FeedbackRow] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    reviewed: bool = False

    @property
    def flag_labels(self) -> list[tuple[str, str]]:
        return [(f, str(FLAG_LABELS.get(f, f))) for f in self.flags]


def display_masker(owner: User, *, mask_money: bool = True) -> Masker:
    """A masker like the pipeline's for this user (their own names included)."""
    return Masker(
        MaskingConfig(
            employee_id_pattern=employee_id_pattern(),
            known_names=tuple(known_names_for(owner)),
            mask_money=mask_money,
        )
    )


def masked_title(conversation: Conversation) -> str:
    """The conversation's title (made from the first message) with personal data masked."""
    return display_masker(conversation.owner).mask(conversation.title or "")


def conversation_timeline(*, conversation: Conversation, viewer: User) -> list[TurnReview]:
    """Every turn of the conversation, oldest first, with trace, answer and feedback."""
    messages = list(conversation.messages.select_related("trace").order_by("created_at", "id"))
    feedback: dict[int, list[Feedback]] = {}
    for item in Feedback.objects.filter(message__conversation=conversation).select_related("user"):
        feedback.setdefault(item.message_id, []).append(item)
    answers = {m.reply_to_id: m for m in messages if m.role == Message.Role.ASSISTANT}
    owner = conversation.owner
    redactor = TurnRedactor(viewer=viewer, messages=messages)
    return [
        turn_review(
            question=message,
            trace=_trace_of(message),
            answer=answers.get(message.id),
            feedback=feedback.get(answers[message.id].id, []) if message.id in answers else [],
            owner=owner,
            redactor=redactor,
        )
        for message in messages
        if message.role == Message.Role.USER
    ]


def turn_review_for_trace(*, trace: TurnTrace, viewer: User) -> TurnReview:
    """One turn, for the trace's own page."""
    question = trace.message
    answer = (
        Message.objects.filter(reply_to=question, role=Message.Role.ASSISTANT)
        .order_by("id")
        .first()
    )
    feedback = (
        list(Feedback.objects.filter(message=answer).select_related("user")) if answer else []
    )
    return turn_review(
        question=question,
        trace=trace,
        answer=answer,
        feedback=feedback,
        owner=question.conversation.owner,
        redactor=TurnRedactor.for_turn(viewer=viewer, question=question),
    )


def _trace_of(message: Message) -> TurnTrace | None:
    try:
        return message.trace
    except TurnTrace.DoesNotExist:
        return None


def turn_review(
    *,
    question: Message,
    trace: TurnTrace | None,
    answer: Message | None,
    feedback: list[Feedback],
    owner: User,
    redactor: TurnRedactor,
) -> TurnReview:
    """Reshape one stored turn for the review templates, as `redactor`'s viewer may see it."""
    masker = display_masker(owner)
    masked_question = trace.masked_question if trace and trace.masked_question else ""
    review = TurnReview(
        question_id=question.id,
        asked_at=question.created_at,
        status=str(question.status),
        # A turn that failed before its trace was written has no masked copy: mask it now.
        masked_question=masked_question or masker.mask(question.text),
    )
    if answer is not None:
        _add_answer(review, answer, owner)
    review.feedback = [
        FeedbackRow(f.value, masker.mask(f.reason), f.user.get_username()) for f in feedback
    ]
    if trace is not None:
        _add_trace(review, trace, feedback)
    _redact(review, redactor, question=question, answer=answer)
    return review


def _add_trace(review: TurnReview, row: TurnTrace, feedback: list[Feedback]) -> None:
    trace = read_trace(row)
    review.trace_id = row.id
    review.reviewed = row.reviewed_at is not None
    review.window = list(trace.masked_window)
    review.rewrite = rewrite_view(trace.rewrite, trace.searched)
    _add_hits(review, trace.search)
    _add_timings(review, trace)
    review.errors = list(trace.errors)
    review.answer_check = trace.answer
    review.flags = turn_flags(
        trace,
        slow_ms=slow_threshold_ms(),
        thumbs_down=any(f.value < 0 for f in feedback),
        thumbs_up=any(f.value > 0 for f in feedback),
    )


def _redact(
    review: TurnReview, redactor: TurnRedactor, *, question: Message, answer: Message | None
) -> None:
    """Placeholders for what came from documents the viewer may not read (flags stay)."""
    if redactor.everything:
        return
    scrub = redactor.scrub
    review.masked_question = scrub(review.masked_question)
    review.window = redactor.window(question=question, window=review.window)
    for hit in review.hits:
        hit.title = redactor.hit_title(hit.title, hit.document)
        hit.document = redactor.hit_document(hit.document)
    for source in review.sources:
        if not redactor.source_readable(source.document_id):
            source.title, source.section = str(RESTRICTED_DOCUMENT), ""
            source.document_id = None
    if answer is not None and redactor.answer_hidden(answer=answer):
        review.answer_text = str(RESTRICTED_PASSAGE)
        review.answer_check = replace(review.answer_check, lines=())
        # A reason given on such an answer may quote it.
        for item in review.feedback:
            item.reason = str(RESTRICTED_PASSAGE) if item.reason else ""
    for item in review.feedback:
        item.reason = scrub(item.reason)
    review.answer_error = scrub(review.answer_error)
    _redact_corrections(review, redactor, question=question)

    def derived(text: str) -> str:
        return redactor.derived(text, question=question)

    for query in review.rewrite.queries:
        # The original query is the person's own words; every other one is derived.
        query.text = scrub(query.text) if query.type == "original" else derived(query.text)
    review.rewrite.notes = [derived(n) for n in review.rewrite.notes]
    review.rewrite.rules = [(rule, derived(detail)) for rule, detail in review.rewrite.rules]
    # The searched words a quoted line says may be words carried from a restricted page.
    check = review.answer_check
    review.answer_check = replace(
        check,
        lines=tuple(
            replace(line, says=tuple(w for w in line.says if derived(w) == w))
            for line in check.lines
        ),
    )
    review.rewrite.anomalies = [derived(a) for a in review.rewrite.anomalies]
    review.errors = [derived(e) for e in review.errors]
    review.rewrite.error = derived(review.rewrite.error)
    clarification = review.rewrite.clarification
    if clarification is not None:
        review.rewrite.clarification = replace(
            clarification,
            question=derived(clarification.question),
            options=tuple(derived(o) for o in clarification.options),
        )


def _redact_corrections(review: TurnReview, redactor: TurnRedactor, *, question: Message) -> None:
    """Undo the spelling fixes a viewer outside the author's groups may not learn.

    A correction comes from the words of the documents the author may read: "dosie" ->
    "dossie" tells that "dossie" is in a restricted document. For a viewer who lacks one
    of the author's groups, the corrected words go back to what was typed, in the queries
    and the notes, and the corrections are not listed.
    """
    if not review.rewrite.corrections:
        return
    author = set(question.conversation.owner.groups.values_list("id", flat=True))
    viewer = set(redactor.viewer.groups.values_list("id", flat=True))
    if author <= viewer:
        return
    for wrong, right in review.rewrite.corrections:
        pattern = re.compile(rf"(?<!\w){re.escape(right)}(?!\w)", re.IGNORECASE)
        for query in review.rewrite.queries:
            query.text = pattern.sub(wrong, query.text)
        review.rewrite.notes = [
            n
            for n in (pattern.sub(wrong, note) for note in review.rewrite.notes)
            if "spelling:" not in n
        ]
        review.rewrite.rules = [
            (rule, pattern.sub(wrong, detail))
            for rule, detail in review.rewrite.rules
            if rule != "spelling"
        ]
    review.rewrite.corrections = []


def _add_answer(review: TurnReview, answer: Message, owner: User) -> None:
    # Amounts in answers come from the policies; mask people's data, not the rules.
    masker = display_masker(owner, mask_money=False)
    sources = [s for s in answer.sources or [] if isinstance(s, dict)]
    _, cited = clean_citations(answer.text, len(sources))
    review.answer_id = answer.id
    review.answer_text = masker.mask(answer.text)
    review.answer_status = str(answer.status)
    review.extractive = answer.extractive
    review.answer_error = answer.error
    review.sources = [
        SourceRow(
            n=int(s.get("n", i)),
            title=str(s.get("title", "")),
            section=str(s.get("section", "")),
            document_id=s.get("document_id"),
            cited=int(s.get("n", i)) in cited,
        )
        for i, s in enumerate(sources, start=1)
    ]


def _add_hits(review: TurnReview, search: TraceSearch) -> None:
    passages = set(search.passages)
    review.hits = [
        HitRow(
            position=i,
            chunk=h.chunk,
            document=h.document,
            title=h.title,
            score=h.score,
            passage=h.chunk in passages,
            corroborated=h.corroborated,
            found_by=[
                FoundBy(f.query + 1, f.rank, f.vector_rank, f.text_rank, f.score)
                for f in h.found_by
            ],
        )
        for i, h in enumerate(search.hits, start=1)
    ]


def _add_timings(review: TurnReview, trace: Trace) -> None:
    timings = trace.timings_ms

    def bars(names: tuple[str, ...]) -> list[Stage]:
        values = [(n, timings[n]) for n in names if n in timings]
        longest = max((v for _, v in values), default=0.0) or 1.0
        return [Stage(n, round(v, 1), round(100 * v / longest, 1)) for n, v in values]

    review.stages = bars(PIPELINE_STAGES)
    review.milestones = bars(MILESTONES)
    review.total_ms = trace.total_ms
