"""Typed readers for environment variables; a bad value stops start-up with a clear message."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_file() -> Path:
    """The `.env` file to read: CHATRAG_ENV_FILE, else the one at the checkout's root."""
    default = Path(__file__).resolve().parent.parent / ".env"
    return Path(os.environ.get("CHATRAG_ENV_FILE") or default)


def load_env_file(path: Path) -> None:
    """Read `path` (a `.env` of KEY=value lines) into the environment, if it exists.

    What the environment already sets wins, so a service manager, docker-compose or a test
    overrides the file; a production container simply has none.
    """
    from dotenv import load_dotenv

    if path.is_file():
        load_dotenv(path, override=False)


def env_str(name: str, default: str = "") -> str:
    """Return the variable as text, or the default when unset."""
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    """Return the variable as a boolean (1/0, true/false, yes/no, on/off)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """Return the variable as an integer, checking a lower bound."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """Return the variable as a float, checking its bounds."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if math.isnan(value):  # float() reads "nan", which every bound lets through
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be <= {maximum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """Return a comma-separated variable as a list of stripped, non-empty items."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: set[str]) -> str:
    """Return the variable when it is one of the allowed values."""
    value = os.environ.get(name, default).strip()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def env_regex(name: str, default: str = "") -> str:
    """Return the variable when it compiles as a regular expression (empty: the default)."""
    value = os.environ.get(name, "") or default
    if value:
        try:
            re.compile(value)
        except re.error as exc:
            raise ImproperlyConfigured(
                f"{name} is not a valid regular expression ({exc}): {value!r}"
            ) from None
    return value
