"""Rewrite fidelity review: a sample of the turns' rewrites queued for staff, who judge each
faithful to the question or not; the rate of faithful rewrites over time.

- Which turns: those whose question's id hashes below CHATRAG_FIDELITY_SAMPLE_RATE
  (`fidelity_sampled`): the same turn is always in or always out, whichever process writes
  it, so a sample is reproducible and testable, and a rate of 0.02 queues one turn in fifty.
- Only a rewrite that gave something to search is judged (`rewrite_judgeable`): small talk
  ("obrigado!") searched nothing, and a turn that failed before its search has no rewrite. A
  rewrite that left the question as typed is judged like any other: leaving a follow-up
  ("e para estagiários?") unchanged is how it loses what it asks about.
- When: as the turn's trace is written, in that transaction (`conversations.services`
  sends `turn_traced`; `QualityConfig.ready` connects `fidelity_on_turn_traced`). A turn that
  is not sampled costs no statement; a sampled one one INSERT, in a savepoint: failing to
  queue never fails the turn.
- What is kept: the question (a link), the rewrite policy's version, the verdict, a masked
  note, who judged and when. The masked question, window and queries are read from the
  turn's trace when staff look (the review page, `conversations.quality.admin.fidelity`).
- The rate (`fidelity_weeks`, `fidelity_chart`): per week of the turns (not of the verdicts:
  a policy's rewrites are dated when it made them), faithful / judged, per policy version.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DatabaseError, transaction
from django.db.models import Count, Q
from django.db.models.functions import TruncWeek
from django.utils import timezone

from conversations.models import Message
from conversations.quality.chart import LineChart, RunValues, line_chart
from conversations.quality.models import RewriteFidelity
from conversations.quality.review.timeline import display_masker
from conversations.trace import TraceRewrite, TraceSearch

logger = logging.getLogger(__name__)

NOTE_CHARS = 2000
CHART_WEEKS = 26
# The series of every policy together, and one colour per policy after it.
ALL_POLICIES = "all"
PALETTE = ("#111827", "#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2")


class FidelityError(ValueError):
    """A verdict that cannot be recorded, with the reason staff see."""


# --- which turns --------------------------------------------------------------------------


def fidelity_sampled(*, message_id: int, rate: float) -> bool:
    """Whether the turn of this question is in a sample of `rate` (0..1) of all turns.

    A hash of the id, not a random draw: the same turn is always in or always out.
    """
    if rate <= 0:
        return False
    if rate >= 1:
        return True
    digest = hashlib.blake2b(f"fidelity:{message_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < rate


def rewrite_judgeable(fields: Mapping[str, Any]) -> bool:
    """Whether a turn's trace (`conversations.trace.trace_fields`) holds a rewrite to judge:
    one that searched something (not small talk; not a turn that failed before its search)."""
    if "rewrite" not in fields:
        return False
    rewrite = TraceRewrite.read(fields["rewrite"])
    if rewrite.no_search:
        return False
    return bool(TraceSearch.read(fields.get("search")).queries or rewrite.queries)


# --- writes ---------------------------------------------------------------------------------


def rewrite_fidelity_queue(
    *, message: Message, fields: Mapping[str, Any], rate: float | None = None
) -> bool:
    """Queue the turn's rewrite for review if it is sampled and judgeable; whether it was.

    Called in the transaction that writes the trace. A turn queued before (its trace written
    again as it failed) stays queued once.
    """
    rate = settings.CHATRAG_FIDELITY_SAMPLE_RATE if rate is None else rate
    if not fidelity_sampled(message_id=message.pk, rate=rate) or not rewrite_judgeable(fields):
        return False
    policy = TraceRewrite.read(fields["rewrite"]).policy
    try:
        with transaction.atomic():  # a savepoint: the turn's own writes never depend on it
            RewriteFidelity.objects.bulk_create(
                [RewriteFidelity(message=message, policy=policy[:200])], ignore_conflicts=True
            )
    except DatabaseError:
        logger.exception("turn %s: could not queue its rewrite for review", message.pk)
        return False
    return True


def fidelity_on_turn_traced(
    sender: Any, *, message: Message, fields: Mapping[str, Any], **kwargs: Any
) -> None:
    """`conversations.services.turn_traced`'s receiver (connected in `QualityConfig.ready`)."""
    rewrite_fidelity_queue(message=message, fields=fields)


@transaction.atomic
def rewrite_fidelity_judge(
    *, item: RewriteFidelity, verdict: str, reviewer: User, note: str = ""
) -> RewriteFidelity:
    """Record a verdict (faithful or not) and its note, masked; a later verdict replaces it."""
    if verdict not in {RewriteFidelity.Verdict.FAITHFUL, RewriteFidelity.Verdict.UNFAITHFUL}:
        raise FidelityError(f"a verdict is faithful or unfaithful, not {verdict!r}")
    message = (
        Message.objects.select_related("conversation__owner").filter(pk=item.message_id).first()
        if item.message_id is not None
        else None
    )
    if message is None:
        raise FidelityError("the conversation was deleted: nothing is left to judge")
    # Staff may quote the person; their note is masked as the turn was.
    masked = display_masker(message.conversation.owner).mask(note.strip())
    item.verdict = verdict
    item.note = masked[:NOTE_CHARS]
    item.reviewer = reviewer
    item.reviewed_at = timezone.now()
    item.save(update_fields=["verdict", "note", "reviewer", "reviewed_at"])
    return item


# --- the rate over time -----------------------------------------------------------------------


@dataclass(frozen=True)
class FidelityWeek:
    """One week's verdicts on one policy's rewrites (the week of the turns)."""

    week: date  # its Monday
    policy: str
    faithful: int
    judged: int

    @property
    def rate(self) -> float:
        return self.faithful / self.judged if self.judged else 0.0


def fidelity_weeks(*, weeks: int = CHART_WEEKS, now: datetime | None = None) -> list[FidelityWeek]:
    """Verdicts per week and policy over the last `weeks` weeks, oldest first (one query)."""
    today = timezone.localdate(now or timezone.now())
    monday = today - timedelta(days=today.weekday() + 7 * (weeks - 1))
    since = timezone.make_aware(datetime.combine(monday, datetime.min.time()))
    rows = (
        RewriteFidelity.objects.exclude(verdict=RewriteFidelity.Verdict.PENDING)
        .filter(created_at__gte=since)
        .annotate(week=TruncWeek("created_at"))
        .values("week", "policy")
        .annotate(
            judged=Count("id"),
            faithful=Count("id", filter=Q(verdict=RewriteFidelity.Verdict.FAITHFUL)),
        )
        .order_by("week", "policy")
    )
    return [
        FidelityWeek(
            week=timezone.localtime(row["week"]).date(),
            policy=row["policy"],
            faithful=row["faithful"],
            judged=row["judged"],
        )
        for row in rows
    ]


@dataclass(frozen=True)
class FidelityCell:
    faithful: int
    judged: int

    @property
    def rate(self) -> float:
        return self.faithful / self.judged if self.judged else 0.0


@dataclass(frozen=True)
class FidelityRow:
    week: date
    label: str
    cells: tuple[FidelityCell | None, ...]  # one per series; None: nothing judged


@dataclass(frozen=True)
class FidelityReport:
    """The rate per week as a chart and as a table of its counts."""

    series: tuple[str, ...]  # "all", then each policy when there are several
    chart: LineChart
    rows: tuple[FidelityRow, ...]  # oldest first

    @property
    def empty(self) -> bool:
        return not self.rows


def fidelity_chart(weeks: Sequence[FidelityWeek]) -> FidelityReport:
    """The share of faithful rewrites per week: every policy together, and each policy on
    its own when the weeks hold more than one (pure: `fidelity_weeks` reads the rows)."""
    policies = sorted({w.policy for w in weeks})
    series = (ALL_POLICIES, *policies) if len(policies) > 1 else (ALL_POLICIES,)
    by_week: dict[date, dict[str, FidelityCell]] = {}
    for w in weeks:
        cells = by_week.setdefault(w.week, {})
        total = cells.get(ALL_POLICIES, FidelityCell(0, 0))
        cells[ALL_POLICIES] = FidelityCell(total.faithful + w.faithful, total.judged + w.judged)
        if len(series) > 1:
            cells[w.policy] = FidelityCell(w.faithful, w.judged)
    rows = tuple(
        FidelityRow(
            week=week,
            label=f"{week:%d/%m}",
            cells=tuple(by_week[week].get(name) for name in series),
        )
        for week in sorted(by_week)
    )
    points = [
        RunValues(
            run_id=row.week.toordinal(),
            label=row.label,
            values={name: c.rate for name, c in zip(series, row.cells, strict=True) if c},
        )
        for row in rows
    ]
    chart = line_chart(points, metric="fidelity", modes=series, palette=PALETTE)
    return FidelityReport(series=series, chart=chart, rows=rows)


def fidelity_report(*, weeks: int = CHART_WEEKS, now: datetime | None = None) -> FidelityReport:
    """The last `weeks` weeks' rate, for the evaluation runs' page."""
    return fidelity_chart(fidelity_weeks(weeks=weeks, now=now))


def fidelity_pending_count() -> int:
    """Rewrites waiting for a verdict whose turn is still there to be judged."""
    return RewriteFidelity.objects.filter(
        verdict=RewriteFidelity.Verdict.PENDING, message__isnull=False
    ).count()
