"""Evaluation cases record the documents their history was written from.

Cases marked from a turn before this get them from that turn's conversation: the sources
of the answers before it and the hits of the turns before it (0 for a hit whose document
is gone: it counts as unreadable).
"""

from typing import Any

from django.db import migrations, models


def fill(apps: Any, schema_editor: Any) -> None:
    EvalCase = apps.get_model("quality", "EvalCase")
    Message = apps.get_model("conversations", "Message")
    TurnTrace = apps.get_model("conversations", "TurnTrace")
    Document = apps.get_model("retrieval", "Document")
    for case in EvalCase.objects.exclude(source_message=None).select_related("source_message"):
        question = case.source_message
        earlier = Message.objects.filter(
            conversation_id=question.conversation_id, id__lt=question.id
        )
        ids: set[int] = set()
        for sources in earlier.filter(role="assistant").values_list("sources", flat=True):
            for source in sources or []:
                if isinstance(source, dict) and isinstance(source.get("document_id"), int):
                    ids.add(source["document_id"])
        named: set[str] = set()
        for search in TurnTrace.objects.filter(message__in=earlier).values_list("search", flat=True):
            for hit in (search or {}).get("hits", []):
                if isinstance(hit, dict) and hit.get("document"):
                    named.add(str(hit["document"]))
        found = dict(
            Document.objects.filter(
                collection_id=case.collection_id, external_id__in=named
            ).values_list("external_id", "pk")
        )
        ids |= {found.get(name, 0) for name in named}
        case.history_documents = sorted(ids)
        case.save(update_fields=["history_documents"])


class Migration(migrations.Migration):
    dependencies = [
        ("quality", "0002_content_types"),
        ("retrieval", "0007_evaluation_moves_to_quality"),
        ("conversations", "0003_access_log_lists"),
    ]

    operations = [
        migrations.AddField(
            model_name="evalcase",
            name="history_documents",
            field=models.JSONField(blank=True, db_default=[], default=list),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
