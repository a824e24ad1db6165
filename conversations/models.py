"""Conversations, their messages, each turn's trace and the users' feedback."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Conversation(models.Model):
    """A chat owned by one user; nobody else ever sees it (staff review goes through the admin)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="conversation_owner_recent")]

    def __str__(self) -> str:
        # Never the title: it is made from the user's first message, and __str__ reaches the
        # admin (page titles, breadcrumbs, history, its log) and logs.
        return f"Conversation {self.pk}"


class Message(models.Model):
    """One message; a user's message is stored before any work is done on it."""

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    class Status(models.TextChoices):
        RECEIVED = "received"  # user message stored, turn not finished
        STREAMING = "streaming"  # assistant answer being written
        COMPLETE = "complete"
        CLARIFY = "clarify"  # assistant asked a clarification question
        STOPPED = "stopped"  # the user stopped generation
        ERROR = "error"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=10, choices=Role.choices)
    text = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.COMPLETE)
    reply_to = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replies"
    )
    # For assistant messages: the numbered sources shown and the citations kept.
    sources = models.JSONField(default=list, blank=True)
    extractive = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["conversation", "created_at"], name="message_conv_time")]

    def __str__(self) -> str:
        return f"{self.role} message {self.pk}"  # no text: it may hold personal data


class TurnTrace(models.Model):
    """What the pipeline did for one user message; masked text only."""

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="trace")
    masked_question = models.TextField(blank=True)
    masked_window = models.JSONField(default=list, blank=True)
    rewrite = models.JSONField(default=dict, blank=True)
    search = models.JSONField(default=dict, blank=True)
    timings_ms = models.JSONField(default=dict, blank=True)
    errors = models.JSONField(default=list, blank=True)
    anomaly = models.BooleanField(default=False)
    clarified = models.BooleanField(default=False)
    no_results = models.BooleanField(default=False)
    # Who wrote the answer and why its lines (`Answer.why(with_text=False)`): each quoted
    # line's card, score and the searched words it says, the coverage, "not found".
    answer = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Staff review: set when someone handled the turn (glossary entry, evaluation case, or
    # nothing to do), so the "needs attention" panel only lists what is still open.
    reviewed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        indexes = [models.Index(fields=["-created_at"], name="trace_recent")]

    def __str__(self) -> str:
        return f"trace of message {self.message_id}"


class AttentionTurn(TurnTrace):
    """The staff panel's view of traces: turns that went wrong and are not reviewed yet."""

    class Meta:
        proxy = True
        verbose_name = "turn needing attention"
        verbose_name_plural = "turns needing attention"


class Feedback(models.Model):
    """A thumbs up or down on an answer, with an optional reason."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    value = models.SmallIntegerField(choices=[(1, "up"), (-1, "down")])
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "user"], name="feedback_one_per_user")
        ]

    def __str__(self) -> str:
        return f"{'+' if self.value > 0 else '-'}1 on message {self.message_id}"


class StaffAccessLog(models.Model):
    """One staff member opening a conversation's data or a review list (who, what, when).

    The conversation may be purged later; the record of the access stays, with its id.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # None: a list page (its filters and search are in `path`), not one conversation.
    conversation_ref = models.BigIntegerField(null=True, blank=True)
    view = models.CharField(max_length=100)
    path = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["conversation_ref", "-created_at"], name="access_conv")]

    def __str__(self) -> str:
        return f"{self.username} → conversation {self.conversation_ref} ({self.view})"
