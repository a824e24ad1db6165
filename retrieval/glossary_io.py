"""Glossary import and export as JSON (admin and command line share these)."""

from __future__ import annotations

from django.db import transaction

from retrieval.models import Collection, GlossaryEntry
from retrieval.pipeline.glossary import parse_glossary_json


@transaction.atomic
def glossary_import(*, collection: Collection, data: object, replace: bool = False) -> int:
    """Create or update entries from JSON data; with `replace`, drop entries not in it."""
    entries = parse_glossary_json(data)
    if replace:
        GlossaryEntry.objects.filter(collection=collection).exclude(
            term__in=[e.term for e in entries]
        ).delete()
    for entry in entries:
        GlossaryEntry.objects.update_or_create(
            collection=collection,
            term=entry.term,
            defaults={"expansion": entry.expansion, "area": entry.area or "", "active": True},
        )
    return len(entries)


def glossary_export(*, collection: Collection) -> list[dict[str, object]]:
    """All entries of a collection, active or not, in the import format."""
    return [
        {"term": e.term, "expansion": e.expansion, "area": e.area or None, "active": e.active}
        for e in GlossaryEntry.objects.filter(collection=collection).order_by("term")
    ]
