"""What measures the product: judged questions (evaluation cases) and evaluation runs.

Both tables were made when these models belonged to the knowledge base (`retrieval`); they
kept their names when the models moved here (migrations `quality.0001` and `retrieval.0007`
move the models' state, not a row).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from conversations.models import Message
from retrieval.models import Collection, Document


class EvalCase(models.Model):
    """A judged question, usually marked by staff from a real conversation (masked text only)."""

    class Category(models.TextChoices):
        STANDALONE = "standalone"
        FOLLOW_UP = "follow-up"
        TOPIC_SWITCH = "topic-switch"
        MULTI_TOPIC = "multi-topic"
        CLARIFICATION = "clarification"

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+")
    question = models.TextField()
    # Earlier messages as [{"role": "user"|"assistant", "text": ...}], masked.
    history = models.JSONField(default=list, blank=True)
    # The documents that history was written from (its answers' sources, its turns' hits), by
    # primary key; 0 for one that was gone. A staff member who may not read one of them sees
    # the history's answers as placeholders (`conversations.quality.admin.evaluation`).
    history_documents = models.JSONField(default=list, blank=True, db_default=[])
    relevant_documents = models.ManyToManyField(Document, blank=True, related_name="+")
    category = models.CharField(
        max_length=30, choices=Category.choices, default=Category.STANDALONE
    )
    expect_clarification = models.BooleanField(default=False)
    language = models.CharField(max_length=10, blank=True)
    note = models.TextField(blank=True)
    active = models.BooleanField(default=True)
    source_message = models.ForeignKey(
        Message,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "retrieval_evalcase"  # made when cases were the knowledge base's (kept)
        ordering = ["-created_at", "-id"]
        verbose_name = "evaluation case"

    def __str__(self) -> str:
        return self.question[:80]


class EvaluationRun(models.Model):
    """One evaluation of retrieval quality, kept so quality can be followed over time."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Source(models.TextChoices):
        CASES = "cases"
        FILE = "file"

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.CASES)
    # The uploaded file's name, or "cases": runs with the same label are comparable.
    source_label = models.CharField(max_length=200)
    # The tasks as evaluated (project format), frozen when the run is created.
    tasks = models.JSONField(default=list, blank=True)
    modes = models.JSONField(default=list)
    ks = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "retrieval_evaluationrun"  # made when runs were the knowledge base's (kept)
        ordering = ["-created_at", "-id"]
        # The playground runs one question through two configurations side by side.
        permissions = [("use_playground", "Can compare retrieval configurations in the playground")]

    def __str__(self) -> str:
        return f"evaluation {self.pk} ({self.source_label}, {self.status})"


class GateRun(models.Model):
    """A candidate rewrite policy against the current one, in shadow: the gate's report.

    Both ran on the same judged tasks (an evaluation tasks file or the evaluation cases) and
    replayed the same sample of real turns (masked); `conversations.quality.gate` decided.
    """

    class Source(models.TextChoices):
        CASES = "cases"
        FILE = "file"

    # Each policy: the rewrite mode, the model (llm only) and its version string
    # ("rules-<hash of the rules>", "llm/<model>/prompt-<hash>", "none", "last-turn").
    current_mode = models.CharField(max_length=20)
    current_model = models.CharField(max_length=200, blank=True)
    current_policy = models.CharField(max_length=300)
    candidate_mode = models.CharField(max_length=20)
    candidate_model = models.CharField(max_length=200, blank=True)
    candidate_policy = models.CharField(max_length=300)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.FILE)
    # The tasks file's name, or "cases".
    source_label = models.CharField(max_length=200)
    real_turns = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict, blank=True)
    passed = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "promotion gate run"
        permissions = [("promote_policy", "Can promote a rewrite policy that passed the gate")]

    def __str__(self) -> str:
        return f"gate {self.pk}: {self.candidate_policy} vs {self.current_policy}"


class PolicyPromotion(models.Model):
    """A rewrite policy promoted by a staff member on a passing gate run (who, when, from → to).

    It records the decision and the settings that make the chat run the policy; the chat's
    policy stays what the environment says (`CHATRAG_REWRITE_MODE`, `CHATRAG_LLM_MODEL`), so
    every web process and worker changes together, at the next deploy.
    """

    gate = models.ForeignKey(GateRun, on_delete=models.PROTECT, related_name="promotions")
    from_policy = models.CharField(max_length=300)
    to_policy = models.CharField(max_length=300)
    to_mode = models.CharField(max_length=20)
    to_model = models.CharField(max_length=200, blank=True)
    # The environment that runs it, e.g. "CHATRAG_REWRITE_MODE=rules".
    setting = models.CharField(max_length=500)
    promoted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    promoted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-promoted_at", "-id"]

    def __str__(self) -> str:
        return f"{self.from_policy} → {self.to_policy}"


class RewriteFidelity(models.Model):
    """A turn's rewrite, sampled for staff to judge faithful to the question or not.

    Queued when the turn's trace is written (`conversations.quality.fidelity`). What staff
    judge is in that trace (masked question, window and queries): nothing is copied here. When
    the conversation is deleted (retention), a verdict stays with its date and policy for the
    rate over time, and nothing of the turn is kept.
    """

    class Verdict(models.TextChoices):
        PENDING = "pending"
        FAITHFUL = "faithful"
        UNFAITHFUL = "unfaithful"

    message = models.OneToOneField(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The rewrite policy's version as the trace recorded it ("" on a trace that had none).
    policy = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    verdict = models.CharField(max_length=12, choices=Verdict.choices, default=Verdict.PENDING)
    # The reviewer's reason, masked like every other text staff write about a turn.
    note = models.TextField(blank=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "rewrite fidelity review"
        indexes = [models.Index(fields=["verdict", "created_at"], name="quality_fidelity_verdict")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(verdict="pending", reviewed_at__isnull=True)
                | (~models.Q(verdict="pending") & models.Q(reviewed_at__isnull=False)),
                name="quality_fidelity_judged_when",
            )
        ]

    def __str__(self) -> str:
        return f"rewrite of message {self.message_id or '(deleted)'}: {self.verdict}"
