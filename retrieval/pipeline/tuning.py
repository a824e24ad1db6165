"""Every threshold of the turn's decisions, in one frozen value (no Django, no I/O).

The rules read the turn's tuning with `tuning()`; `plan_turn` sets it from the turn request
for the duration of the turn (a context variable: each turn, each thread `asyncio.to_thread`
starts, sees its own). `manage.py evaluate --tuning FILE` runs the evaluation with another
one, a JSON object of the fields to change:

    {"strong": 0.5, "neighbourhood": 4}

The values were chosen on ptes-dev and MTRAG; check a change on ptes-aurora too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, cast


@dataclass(frozen=True)
class Tuning:
    """The decision code's thresholds; each line says what raising it trades."""

    # --- how rare a word is (rewrite_rules.lexicon: normalised IDF, 0 everywhere, 1 once) ---
    # A word names a topic on its own above this: higher carries fewer, surer words.
    strong: float = 0.45
    # A word is too common to carry below this: higher drops more words from topics.
    common: float = 0.25

    # --- carrying the topic (rewrite_rules.context) ---
    # Rare words taken from the turn that names the topic: more is fuller but noisier.
    anchor_terms: int = 4
    # Rare words taken from each dependent turn after it.
    subtopic_terms: int = 2
    # Rare words the turn before the newest self-contained one lends.
    earlier_anchor_terms: int = 1
    # A turn of common words leans on the conversation up to this length: higher reads more
    # turns as follow-ups.
    weak_max_terms: int = 2
    # A short turn's word names a topic alone above this rarity: higher carries the topic
    # into more short turns (0.6-0.8 alike on MTRAG, 0.45 worse).
    short_strong: float = 0.65

    # --- asking back on the words (rewrite_rules.core) ---
    # A question with nothing to carry and at most this many own words may be too vague:
    # higher lets the evidence ask back on longer questions.
    short_question_terms: int = 3
    # Content words up to which a turn that points back at nothing is only a pointer:
    # higher asks back more often.
    pointing_alone_terms: int = 2

    # --- small talk (rewrite_rules.smalltalk): recognised by what it lacks ---
    # Words a turn may have and still be small talk: higher replies politely to longer
    # turns (a long thank-you note), lower searches them and reopens the topic. Ten holds
    # "muito obrigado pela ajuda, era exatamente isso que eu precisava"; the small talk of
    # ptes-dev has at most four.
    small_talk_max_words: int = 10
    # A word the knowledge base knows at least this rarely (normalised IDF) is a content
    # word and makes the turn a question: higher lets more known words pass as chat
    # ("show", "top"), lower searches more thank-you notes. `common`'s value: a word in
    # nearly every chunk tells no topic.
    small_talk_content: float = 0.25
    # Share of the turn's own words (not stop words) that must be small-talk words: higher
    # searches more slangy thanks ("vlw demais, salvou"), lower takes a question about what
    # the pages do not cover, that ends in "isso" and lost its "?", for an acknowledgement.
    small_talk_share: float = 0.5
    # A return to an earlier topic ("voltando aos reembolsos") finds the turn that named it
    # by words sharing this many first letters: lower matches unrelated words of one root.
    return_stem: int = 5
    # Content words up to which a negation followed by a noun phrase ("não, o plano
    # odontológico") names what was meant: higher reads longer statements as corrections.
    bare_correction_terms: int = 3

    # --- the search evidence (evidence.py) ---
    # A leg's rank that counts as "found it confidently": higher trusts weaker hits.
    confident_rank: int = 3
    # How deep in the topic probe's documents the turn's best may be and still belong to
    # the conversation: higher keeps more turns as follow-ups.
    neighbourhood: int = 5
    # Rare words of its own that make a turn name a new topic: lower drops the topic sooner.
    new_terms: int = 3
    # A carried topic up to this long that lands confidently decides a drifting turn.
    focused_topic_terms: int = 3
    # When undecided, the turn's own reading's weight beside the topic-aware one.
    both_standalone_weight: float = 1.0
    # The last reply's best documents that win close calls in a follow-up.
    reply_documents: int = 3
    # The share of the best fused score they gain: higher outvotes the turn's own search.
    reply_boost: float = 0.05
    # How many of the best documents a clarification weighs.
    clarify_depth: int = 3
    # Options a clarification offers at most.
    max_options: int = 4
    # The words of a title's subject a reply must say to name the page.
    head_words: int = 2

    # --- asking back on the pages found (ask_back.py) ---
    # Found pages whose titles the last reply may have named.
    reply_option_pages: int = 8
    # The best distinct pages whose readings may split.
    titles_read: int = 4
    # Pages offered to a turn that points at nothing.
    pointer_options: int = 3

    # --- filters (filters.py) ---
    # Words before a genitive in which the owning noun may stand.
    owner_reach: int = 3
    # Share of the shorter title's subject words two versions of a page have in common.
    sibling_share: float = 0.5

    # --- the extractive answer's sections (answer/extractive.py) ---
    # (What a section heading's words weigh for its lines is the line model's, fitted:
    # answer/line_weights.json.)
    # A chosen table row brings its whole table up to this many rows (a longer table gives
    # its chosen rows, each with its column names): higher shows more whole tables, and
    # longer answers.
    table_rows: int = 6
    # A chosen numbered step brings its whole procedure up to this many words, whatever is
    # asked (a how-to question brings it at any length; a longer one otherwise shows the
    # chosen step alone): higher shows more whole procedures, and pushes the lines after
    # them down.
    procedure_words: int = 60

    def digest(self) -> str:
        """A short hash of the values (a policy's name when they are not the defaults)."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


DEFAULT_TUNING = Tuning()
_CURRENT: ContextVar[Tuning] = ContextVar("tuning", default=DEFAULT_TUNING)


class TuningError(ValueError):
    """A tuning file that cannot be used: the message says why."""


def tuning() -> Tuning:
    """The thresholds of the turn being decided (the defaults outside one)."""
    return _CURRENT.get()


@contextmanager
def tuned(value: Tuning) -> Iterator[None]:
    """Decide with `value` inside the block (and in the threads it starts with to_thread)."""
    token = _CURRENT.set(value)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def tuning_from_json(text: str, *, where: str = "tuning") -> Tuning:
    """The defaults with the fields a JSON object changes; a clear error for anything else."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TuningError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise TuningError(f"{where}: give a JSON object of fields to change")
    known = {f.name: f for f in fields(Tuning)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise TuningError(f"{where}: unknown field(s) {', '.join(unknown)}")
    values: dict[str, int | float] = {}
    for name, value in data.items():
        default = getattr(DEFAULT_TUNING, name)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        if not ok or (isinstance(default, int) and not isinstance(value, int)):
            kind = "a whole number" if isinstance(default, int) else "a number"
            raise TuningError(f"{where}: {name} must be {kind} of at least 0, not {value!r}")
        values[name] = value
    return replace(DEFAULT_TUNING, **cast(dict[str, Any], values))


def tuning_load(path: Path) -> Tuning:
    """Read a tuning file (`tuning_from_json`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TuningError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return tuning_from_json(text, where=str(path))
