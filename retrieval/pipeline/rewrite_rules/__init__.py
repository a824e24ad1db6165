"""Rule-based query rewriter: the default without a chat model, and its fallback.

Pure: the caller fetches corpus statistics for `lexicon_words(inp)` into a LexiconView
and passes them in; nothing here touches the database.
"""

from __future__ import annotations

from retrieval.pipeline.rewrite_rules.core import lexicon_words, rewrite_with_rules

__all__ = ["lexicon_words", "rewrite_with_rules"]
