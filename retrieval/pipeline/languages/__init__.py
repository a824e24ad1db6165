"""What the chat knows and says of each language without a model, one data file a language.

`<lang>.json` beside this module holds the language's stop words (its common words and the
chat's fillers), the small-talk replies, the questions the rules ask back and the labels that
announce an identifier ("matrícula", "número de empleado": the masking reads them). A language's
phrases are a file: a language without one speaks Portuguese (the product's first language).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
FALLBACK = "pt"


class LanguageDataError(ValueError):
    """A language file that cannot be used: the message names it and says why."""


@dataclass(frozen=True)
class Phrases:
    """One language's phrases (see pt.json for the fields)."""

    small_talk_replies: dict[str, str] = field(default_factory=dict)
    ask_which: tuple[str, str] = ("", "")  # a template with {} for the options; the last "or"
    ask_for_details: str = ""
    ask_for_the_topic_out_of_sight: str = ""


def phrases_load(path: Path) -> Phrases:
    """Read one language file; a clear error for a file that is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        which = data.get("ask_which", {})
        phrases = Phrases(
            small_talk_replies={str(k): str(v) for k, v in data["small_talk_replies"].items()},
            ask_which=(str(which["template"]), str(which["last_separator"])),
            ask_for_details=str(data["ask_for_details"]),
            ask_for_the_topic_out_of_sight=str(data["ask_for_the_topic_out_of_sight"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LanguageDataError(f"{path}: not a language file ({exc!r})") from exc
    if "{}" not in phrases.ask_which[0]:
        raise LanguageDataError(f"{path}: ask_which.template has no {{}} for the options")
    return phrases


@cache
def phrases(language: str | None, folder: Path = FOLDER) -> Phrases:
    """The phrases of `language` (Portuguese's where it has no file in `folder`)."""
    path = folder / f"{language or FALLBACK}.json"
    if not path.is_file():
        path = FOLDER / f"{FALLBACK}.json"
    return phrases_load(path)


@cache
def stop_words(language: str, folder: Path = FOLDER) -> tuple[str, ...]:
    """The language's stop words as its file writes them: common words, then the chat's
    fillers (none for a language without a file)."""
    path = folder / f"{language}.json"
    if not path.is_file():
        return ()
    try:
        lists = json.loads(path.read_text(encoding="utf-8"))["stop_words"]
        return tuple(str(w) for name in ("common", "fillers") for w in lists[name])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LanguageDataError(f"{path}: no stop_words lists ({exc!r})") from exc


@cache
def identifier_labels(folder: Path = FOLDER) -> tuple[str, ...]:
    """The labels that announce a personal identifier, of every language in `folder`.

    All languages at once: a question in Portuguese may quote a Mexican "RFC".
    """
    labels: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            found = json.loads(path.read_text(encoding="utf-8")).get("identifier_labels", [])
        except (OSError, ValueError) as exc:
            raise LanguageDataError(f"{path}: not a language file ({exc!r})") from exc
        if not isinstance(found, list):
            raise LanguageDataError(f"{path}: identifier_labels is not a list")
        labels.extend(str(label) for label in found)
    return tuple(dict.fromkeys(labels))


@cache
def small_talk_words(folder: Path = FOLDER) -> dict[str, tuple[str, ...]]:
    """The words that tell which kind of small talk a turn is ("thanks", "greeting",
    "farewell", "ack"), of every language in `folder`, as the files write them.

    All languages at once: a turn of two words rarely tells its language ("ok, gracias").
    They choose the reply; what makes a turn small talk is what it lacks (see
    rewrite_rules.smalltalk).
    """
    kinds: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            found = json.loads(path.read_text(encoding="utf-8")).get("small_talk_words", {})
            for kind, words in found.items():
                if not isinstance(words, list):
                    raise TypeError(f"{kind} is not a list")
                kinds.setdefault(str(kind), []).extend(str(w) for w in words)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise LanguageDataError(f"{path}: no small_talk_words lists ({exc!r})") from exc
    return {kind: tuple(dict.fromkeys(words)) for kind, words in kinds.items()}


@cache
def request_words(folder: Path = FOLDER) -> tuple[str, ...]:
    """The words that ask for something wherever they stand ("explica", "dime", "tell"), of
    every language in `folder`: a turn with one is never small talk."""
    words: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            found = json.loads(path.read_text(encoding="utf-8")).get("request_words", [])
        except (OSError, ValueError) as exc:
            raise LanguageDataError(f"{path}: not a language file ({exc!r})") from exc
        if not isinstance(found, list):
            raise LanguageDataError(f"{path}: request_words is not a list")
        words.extend(str(w) for w in found)
    return tuple(dict.fromkeys(words))
