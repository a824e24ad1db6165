#!/usr/bin/env python
"""Django's command-line utility."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatrag.settings")
    # A development checkout (CHATRAG_DEBUG=1, no DATABASE_URL, e.g. the `.env` `make` writes)
    # gets its embedded PostgreSQL started here; settings themselves never start anything.
    from chatrag.dev.db import start_for_development

    start_for_development()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
