"""What the chat says when it asks which page is meant, and how an answer to it is read back.

`clarification_question` words the question back from the language file's `ask_which`
template; `chosen_option` reads a later turn against it: a clicked option's button sends the
option's title, and the rewriter (rule `chosen_option`) searches it with the question asked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .languages import language_files, phrases
from .text import normalize


def clarification_question(options: Sequence[str], language: str | None) -> str:
    """Ask which reading is meant, naming the options: "Você quer saber sobre X, Y ou Z?"."""
    template, last = phrases(language).ask_which
    names = list(options)
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + last + names[-1]
    return template.format(listed)


def chosen_option(text: str, reply: str | None) -> str | None:
    """The option of a question back (`clarification_question`, in any language) that the
    turn `text` is, or None: a clicked option's button sends its title as the turn.

    The reply is read back through each language's `ask_which` template; the turn is an
    option when it is one of the listed names whole (between the template's edges, ", " and
    the last separator), so a title holding a comma is still found.
    """
    said = normalize(text).strip(" ?.!")
    if not reply or not said:
        return None
    for language in language_files():
        template, last = phrases(language).ask_which
        before, _, after = template.partition("{}")
        listed = reply.strip()
        if not (listed.startswith(before) and listed.endswith(after)) or not after:
            continue
        listed = normalize(listed[len(before) : len(listed) - len(after)])
        edges = rf"(?:^|, |{re.escape(normalize(last))})"
        ends = rf"(?:$|, |{re.escape(normalize(last))})"
        if re.search(edges + re.escape(said) + ends, listed):
            return text.strip()
    return None
