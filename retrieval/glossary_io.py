"""Glossary import and export as JSON (admin and command line share these)."""

from __future__ import annotations

from django.db import transaction

from retrieval.models import Collection, GlossaryEntry
from retrieval.pipeline.glossary import parse_glossary_json


@transaction.atomic
def glossary_import(
    *, collection: Collection, data: object, replace: bool = False, only_new: bool = False
) -> int:
    """Create or update entries from JSON data; with `replace`, drop entries not in it.

    With `only_new`, terms the collection has already are left as they are (an admin's
    edits and deactivations survive `make run` loading the demo glossary again)."""
    entries = parse_glossary_json(data)
    if replace:
        kept = {(e.term, e.language) for e in entries}
        stale = [
            row.pk
            for row in GlossaryEntry.objects.filter(collection=collection)
            if (row.term, row.language) not in kept
        ]
        GlossaryEntry.objects.filter(pk__in=stale).delete()
    write = (
        GlossaryEntry.objects.get_or_create if only_new else GlossaryEntry.objects.update_or_create
    )
    for entry in entries:
        values = {"expansion": entry.expansion, "area": entry.area or "", "active": True}
        write(collection=collection, term=entry.term, language=entry.language, defaults=values)
    return len(entries)


def glossary_export(*, collection: Collection) -> list[dict[str, object]]:
    """All entries of a collection, active or not, in the import format."""
    return [
        {
            "term": e.term,
            "expansion": e.expansion,
            "area": e.area or None,
            "language": e.language or None,
            "active": e.active,
        }
        for e in GlossaryEntry.objects.filter(collection=collection).order_by("term", "language")
    ]
