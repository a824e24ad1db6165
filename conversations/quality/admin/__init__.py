"""The quality pages of the Django admin: staff review of conversations and turns (`review`,
`filters`), evaluation cases and runs (`evaluation`), the playground (`playground`), the
promotion gate's runs and promotions (`gate`) and the rewrite fidelity review (`fidelity`).

The review pages keep their models' addresses (`/admin/conversations/...`); the evaluation
pages are under `/admin/quality/` (`conversations.quality.urls` sends the old
`/admin/retrieval/evalcase/` and `/admin/retrieval/evaluationrun/` addresses there).
"""

from conversations.quality.admin.evaluation import EvalCaseAdmin, EvaluationRunAdmin
from conversations.quality.admin.fidelity import RewriteFidelityAdmin
from conversations.quality.admin.gate import GateRunAdmin, PolicyPromotionAdmin
from conversations.quality.admin.review import (
    AttentionTurnAdmin,
    ConversationAdmin,
    FeedbackAdmin,
    StaffAccessLogAdmin,
    TurnTraceAdmin,
)

__all__ = [
    "AttentionTurnAdmin",
    "ConversationAdmin",
    "EvalCaseAdmin",
    "EvaluationRunAdmin",
    "FeedbackAdmin",
    "GateRunAdmin",
    "PolicyPromotionAdmin",
    "RewriteFidelityAdmin",
    "StaffAccessLogAdmin",
    "TurnTraceAdmin",
]
