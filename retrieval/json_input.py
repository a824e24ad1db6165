"""JSON that a person supplied (an upload, a form field, a file), read without surprises."""

from __future__ import annotations

import json


class JSONInputError(ValueError):
    """The text is no JSON this product can store; the message names where it came from."""


def json_parse(text: str, *, where: str) -> object:
    """Parse `text`, or raise JSONInputError naming `where`.

    - Nesting past Python's recursion limit made `json.loads` raise RecursionError: an HTTP
      500 on the admin's uploads ("[" * 5000).
    - PostgreSQL stores no NUL in text or jsonb: "\\u0000" in a string was a 500 when saved.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JSONInputError(f"{where}: invalid JSON ({exc.msg})") from exc
    except RecursionError as exc:
        raise JSONInputError(f"{where}: invalid JSON (nested too deeply)") from exc
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise JSONInputError(f"{where}: a NUL character in a string")
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return value
