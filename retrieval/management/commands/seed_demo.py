"""`manage.py seed_demo`: the demo knowledge base, its glossary and the demo users."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand

from retrieval.glossary_io import glossary_import
from retrieval.services import default_collection

RESTRICTED_GROUP = "rh-restrito"
DEMO_USERS = [
    # username, password, groups, staff, full name
    ("ana", "ana-demo-2026", [], False, "Ana Souza"),
    ("rita", "rita-demo-2026", [RESTRICTED_GROUP], False, "Rita Lima"),
    ("admin", "admin-demo-2026", [RESTRICTED_GROUP], True, "Admin Demo"),
]


class Command(BaseCommand):
    help = "Ingest the demo knowledge base (only what changed), load its glossary, create users."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--no-ingest", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        kb = settings.CHATRAG_DEMO_KB
        if not options["no_ingest"]:
            call_command("ingest", str(kb), "--prune", "--quiet", stdout=self.stdout)
        glossary_path = kb.parent / "glossary.json"
        if glossary_path.exists():
            # Terms the admin edited or switched off stay as the admin left them.
            count = glossary_import(
                collection=default_collection(),
                data=json.loads(glossary_path.read_text(encoding="utf-8")),
                only_new=True,
            )
            self.stdout.write(f"glossary: {count} entries")
        Group.objects.get_or_create(name=RESTRICTED_GROUP)
        lines = []
        for username, password, groups, staff, full_name in DEMO_USERS:
            user, created = User.objects.get_or_create(username=username)
            if created:
                first, _, last = full_name.partition(" ")
                user.first_name, user.last_name = first, last
                user.set_password(password)
                user.is_staff = user.is_superuser = staff
                user.save()
                user.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups])
            role = "admin" if staff else (f"groups: {', '.join(groups)}" if groups else "employee")
            lines.append(f"  {username:<6} / {password:<16} ({role})")
        self.stdout.write("demo users (username / password):\n" + "\n".join(lines))
