"""Rule-based query rewriter: the default without a chat model, and its fallback.

Pure: the caller fetches corpus statistics for `lexicon_words(inp)` into a LexiconView
and passes them in; nothing here touches the database.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

from retrieval.pipeline.languages import language_files
from retrieval.pipeline.rewrite_rules.core import lexicon_words, rewrite_with_rules
from retrieval.pipeline.tuning import DEFAULT_TUNING, Tuning

_PIPELINE = Path(__file__).resolve().parent.parent
# Where the rules' decisions, word lists and thresholds live: the rewriter itself, and the
# pure steps that decide with it (the turn's words, the search evidence, the filters).
POLICY_SOURCES: Final = (
    *sorted(Path(__file__).resolve().parent.glob("*.py")),
    *(
        _PIPELINE / name
        for name in (
            "asks.py",
            "ask_back.py",
            "ask_phrases.py",
            "dictionary.py",
            "evidence.py",
            "filters.py",
            "glossary.py",
            "text.py",
            "tuning.py",
        )
    ),
    # Every language file in use, built-in or from CHATRAG_LANGUAGE_DIRS: the words the rules
    # read and the phrases they answer with.
    *(path for _, path in sorted(language_files().items())),
)


def policy_version(sources: tuple[Path, ...] = POLICY_SOURCES) -> str:
    """The rules' policy version: a hash of the files that hold their rules, word lists and
    thresholds, so any change to what they may decide is a new version (never bumped by
    hand). Traces, evaluations, the promotion gate and the rewrite cache tell them apart."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return f"rules-{digest.hexdigest()[:12]}"


POLICY_VERSION: Final = policy_version()


def tuned_policy(value: Tuning) -> str:
    """The rules' policy under `value`: another tuning than the defaults is another policy."""
    if value == DEFAULT_TUNING:
        return POLICY_VERSION
    return f"{POLICY_VERSION}+tuning-{value.digest()}"


__all__ = [
    "POLICY_SOURCES",
    "POLICY_VERSION",
    "lexicon_words",
    "policy_version",
    "rewrite_with_rules",
    "tuned_policy",
]
