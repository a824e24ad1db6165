"""Staff review of conversations in the Django admin (see `review` and `filters`)."""

from conversations.admin.review import (
    AttentionTurnAdmin,
    ConversationAdmin,
    FeedbackAdmin,
    StaffAccessLogAdmin,
    TurnTraceAdmin,
)

__all__ = [
    "AttentionTurnAdmin",
    "ConversationAdmin",
    "FeedbackAdmin",
    "StaffAccessLogAdmin",
    "TurnTraceAdmin",
]
