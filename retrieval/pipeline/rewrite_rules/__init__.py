"""Rule-based query rewriter: the default without a chat model, and its fallback.

Pure: the caller fetches corpus statistics for `lexicon_words(inp)` into a LexiconView
and passes them in; nothing here touches the database.
"""

from __future__ import annotations

from typing import Final

from retrieval.pipeline.rewrite_rules.core import lexicon_words, rewrite_with_rules

# The rules' policy version, recorded in every trace the rules produce (and, later, part of
# a cached rewrite's key): bump it with any change that alters what the rules output.
POLICY_VERSION: Final = "rules-2026.12.2"

__all__ = ["POLICY_VERSION", "lexicon_words", "rewrite_with_rules"]
