"""What the chat knows and says of each language without a model, one data file a language.

`<lang>.json` beside this module holds the language's stop words (its common words and the
chat's fillers), the words the rules read as cues (references back, openers, topic switches),
how its words are stemmed and told apart from other languages', the small-talk replies, the
questions the rules ask back and the labels that announce an identifier ("matrícula", "número
de empleado": the masking reads them). The languages the chat knows are the files: those here
and those in the folders of ``CHATRAG_LANGUAGE_DIRS`` (separated by ``os.pathsep``; a file there
replaces the built-in one of its name). A language's phrases are a file: a language without one
speaks Portuguese (the product's first language).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent
FALLBACK = "pt"
DIRS_VARIABLE = "CHATRAG_LANGUAGE_DIRS"
_CODE = re.compile(r"[a-z]{2,3}")


class LanguageDataError(ValueError):
    """A language file that cannot be used: the message names it and says why."""


def folders() -> tuple[Path, ...]:
    """The built-in folder, then those named by ``CHATRAG_LANGUAGE_DIRS``."""
    extra = os.environ.get(DIRS_VARIABLE, "")
    return (FOLDER, *(Path(p) for p in extra.split(os.pathsep) if p.strip()))


@cache
def _files(searched: tuple[Path, ...]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in searched:
        if not folder.is_dir():
            raise LanguageDataError(f"{folder}: {DIRS_VARIABLE} names a folder that is not there")
        for path in sorted(folder.glob("*.json")):
            if not _CODE.fullmatch(path.stem):
                raise LanguageDataError(
                    f"{path}: a language file is named by its code (pt.json, it.json)"
                )
            found[path.stem] = path  # a later folder's file replaces an earlier one's
    return found


def language_files(folder: Path | None = None) -> dict[str, Path]:
    """Each language's file, in precedence order (a file's ``precedence``, then its code):
    the first is preferred where two languages score alike."""
    files = _files((folder,) if folder is not None else folders())
    return dict(sorted(files.items(), key=lambda item: (_precedence(item[1]), item[0])))


def _precedence(path: Path) -> int:
    value = _data(path).get("precedence", 99)
    if not isinstance(value, int):
        raise LanguageDataError(f"{path}: precedence is not a whole number")
    return value


@cache
def _data(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LanguageDataError(f"{path}: not a language file ({exc!r})") from exc
    if not isinstance(data, dict):
        raise LanguageDataError(f"{path}: not a language file (not a JSON object)")
    return data


def language_data(language: str, folder: Path | None = None) -> dict[str, Any]:
    """The parsed file of `language` ({} for a language without a file)."""
    path = language_files(folder).get(language)
    return _data(path) if path is not None else {}


def language_codes(folder: Path | None = None) -> tuple[str, ...]:
    """The languages the chat knows: one per file, in precedence order."""
    return tuple(language_files(folder))


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
def phrases(language: str | None, folder: Path | None = None) -> Phrases:
    """The phrases of `language` (Portuguese's where it has no file)."""
    files = language_files(folder)
    path = files.get(language or FALLBACK) or language_files()[FALLBACK]
    return phrases_load(path)


@cache
def stop_words(language: str, folder: Path | None = None) -> tuple[str, ...]:
    """The language's stop words as its file writes them: common words, then the chat's
    fillers (none for a language without a file)."""
    path = language_files(folder).get(language)
    if path is None:
        return ()
    try:
        lists = _data(path)["stop_words"]
        return tuple(str(w) for name in ("common", "fillers") for w in lists[name])
    except (KeyError, TypeError) as exc:
        raise LanguageDataError(f"{path}: no stop_words lists ({exc!r})") from exc


@cache
def identifier_labels(folder: Path | None = None) -> tuple[str, ...]:
    """The labels that announce a personal identifier, of every language known.

    All languages at once: a question in Portuguese may quote a Mexican "RFC".
    """
    return _in_every_file("identifier_labels", folder)


def _in_every_file(key: str, folder: Path | None) -> tuple[str, ...]:
    """The top-level list `key` of every language file (in order of their codes), each
    entry once."""
    found: list[str] = []
    for _, path in sorted(language_files(folder).items()):
        values = _data(path).get(key, [])
        if not isinstance(values, list):
            raise LanguageDataError(f"{path}: {key} is not a list")
        found.extend(str(v) for v in values)
    return tuple(dict.fromkeys(found))


_CONFIG_NAME = re.compile(r"[a-z_]{1,63}")


def text_search_configs() -> dict[str, str]:
    """Each language's PostgreSQL text-search configuration ("text_search_config":
    "portuguese"), in precedence order; a language without one is searched with "simple"."""
    configs: dict[str, str] = {}
    for code, path in language_files().items():
        config = _data(path).get("text_search_config")
        if config is None:
            continue
        if not isinstance(config, str) or not _CONFIG_NAME.fullmatch(config):
            raise LanguageDataError(f"{path}: text_search_config is not a configuration name")
        configs[code] = config
    return configs


def _entry(language: str, path: Sequence[str]) -> tuple[Path | None, object]:
    """The value at `path` in a language's file (its file, and None where absent); a key
    on the way that holds no mapping is an error."""
    file = language_files().get(language)
    if file is None:
        return None, None
    value: object = _data(file)
    for depth, key in enumerate(path):
        if not isinstance(value, dict):
            raise LanguageDataError(f"{file}: {'.'.join(path[:depth])} is not a mapping")
        value = value.get(key)
        if value is None:
            break
    return file, value


def word_list(language: str, *path: str) -> tuple[str, ...]:
    """A list of words or phrases at `path` ("cues", "openers") of a language's file,
    normalised by the caller; () where the file or the list is absent (a language need not
    say everything)."""
    file, value = _entry(language, path)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise LanguageDataError(f"{file}: {'.'.join(path)} is not a list of strings")
    return tuple(value)


def every_word_list(*path: str) -> tuple[str, ...]:
    """The lists at `path` of every language known, in precedence order, each entry once:
    the rules that read a cue whatever the turn's language (a Spanish page may be asked
    about in Portuguese)."""
    return tuple(dict.fromkeys(w for code in language_codes() for w in word_list(code, *path)))


def language_mappings(*path: str) -> list[dict[str, Any]]:
    """The mappings at `path` of every language that has one, in precedence order."""
    found: list[dict[str, Any]] = []
    for code in language_codes():
        file, value = _entry(code, path)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise LanguageDataError(f"{file}: {'.'.join(path)} is not a mapping")
        found.append(value)
    return found


def keyed_word_lists(*path: str) -> dict[str, tuple[str, ...]]:
    """The lists by key at `path` ("places", "countries") of every language known, merged: a
    key's entries from each file in precedence order, each entry once. The keys are shared by
    the files (a country's key), so a file may add its own names to another file's key."""
    merged: dict[str, dict[str, None]] = {}
    for code in language_codes():
        file, value = _entry(code, path)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise LanguageDataError(f"{file}: {'.'.join(path)} is not a mapping")
        for key, words in value.items():
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise LanguageDataError(
                    f"{file}: {'.'.join((*path, key))} is not a list of strings"
                )
            merged.setdefault(key, {}).update(dict.fromkeys(words))
    return {key: tuple(words) for key, words in merged.items()}


def language_text(language: str, *path: str) -> str:
    """One text (a pattern, a set of letters) at `path` of a language's file; "" where the
    file or the entry is absent."""
    file, value = _entry(language, path)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise LanguageDataError(f"{file}: {'.'.join(path)} is not a text")
    return value


@cache
def small_talk_words(folder: Path | None = None) -> dict[str, tuple[str, ...]]:
    """The words that tell which kind of small talk a turn is ("thanks", "greeting",
    "farewell", "ack"), of every language known, as the files write them.

    All languages at once: a turn of two words rarely tells its language ("ok, gracias").
    They choose the reply; what makes a turn small talk is what it lacks (see
    rewrite_rules.smalltalk).
    """
    kinds: dict[str, list[str]] = {}
    for _, path in sorted(language_files(folder).items()):
        try:
            found = _data(path).get("small_talk_words", {})
            for kind, words in found.items():
                if not isinstance(words, list):
                    raise TypeError(f"{kind} is not a list")
                kinds.setdefault(str(kind), []).extend(str(w) for w in words)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise LanguageDataError(f"{path}: no small_talk_words lists ({exc!r})") from exc
    return {kind: tuple(dict.fromkeys(words)) for kind, words in kinds.items()}


@cache
def request_words(folder: Path | None = None) -> tuple[str, ...]:
    """The words that ask for something wherever they stand ("explica", "dime", "tell"), of
    every language known: a turn with one is never small talk."""
    return _in_every_file("request_words", folder)
