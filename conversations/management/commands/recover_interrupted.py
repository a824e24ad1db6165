"""`manage.py recover_interrupted`: fail the turns a stopped server left "in progress".

Run it when a web server starts. With other servers running on the same database, the default
only touches turns idle for longer than any live turn can be (its model and rewrite timeouts
plus a minute, or CHATRAG_INTERRUPTED_AFTER_SECONDS; Celery beat runs the same sweep every
CHATRAG_RECOVER_EVERY_SECONDS); `--all` is for a single server (`make run` does this before it
starts).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from conversations.services import messages_fail_interrupted, messages_recover_interrupted


class Command(BaseCommand):
    help = "Mark questions and answers left in progress by a stopped server as failed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--all", action="store_true", help="every unfinished turn: no other server runs"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["all"]:
            count = messages_fail_interrupted(before=None)
        else:
            count = messages_recover_interrupted()
        self.stdout.write(f"{count} interrupted message(s) marked failed")
