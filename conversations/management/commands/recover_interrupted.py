"""`manage.py recover_interrupted`: fail the turns a stopped server left "in progress".

Run it when a web server starts. With other servers running on the same database, the default
only touches turns idle for longer than any live turn can be (its model and rewrite timeouts
plus a minute); `--all` is for a single server (`make run` does this before it starts).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from conversations.services import messages_fail_interrupted


def idle_limit() -> timedelta:
    """Longer than a live turn goes without writing: a model stall plus a rewrite, and a margin."""
    return timedelta(seconds=settings.CHATRAG_LLM_TIMEOUT + settings.CHATRAG_REWRITE_TIMEOUT + 60)


class Command(BaseCommand):
    help = "Mark questions and answers left in progress by a stopped server as failed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--all", action="store_true", help="every unfinished turn: no other server runs"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        before = None if options["all"] else timezone.now() - idle_limit()
        count = messages_fail_interrupted(before=before)
        self.stdout.write(f"{count} interrupted message(s) marked failed")
