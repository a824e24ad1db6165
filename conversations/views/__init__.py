"""The chat pages (`pages`) and what they render (`present`, pure)."""

from __future__ import annotations

from conversations.views.pages import (
    chat,
    conversation,
    delete,
    document,
    feedback,
    healthz,
    rename,
)

__all__ = ["chat", "conversation", "delete", "document", "feedback", "healthz", "rename"]
