"""The evaluation models moved from `retrieval` to `quality`: Django's record of them moved,
not a row (`retrieval.0007`, `quality.0001`, and `quality.0002` for their content types).

Run on a database holding the demo's documents, a conversation, an evaluation case pointing
into both, a run and a group granted the playground, migrated back to before the move and
forward again: no statement touches the tables or changes the schema, the rows read the same
through the new models, and what staff were granted before still holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps.registry import Apps
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

from conversations.quality.models import EvalCase, EvaluationRun, RewriteFidelity

pytestmark = pytest.mark.django_db

BEFORE = ("retrieval", "0006_vocabulary_version")
TABLES = ("retrieval_evalcase", "retrieval_evalcase_relevant_documents", "retrieval_evaluationrun")
RIGHT = ["pt/vale-refeicao-trabalho-remoto", "pt/faixas-salariais-2026"]


MOVED = ("quality", "0002_content_types")  # the last migration of the move


def _migrate(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    # The test's own rows leave deferred foreign-key checks pending in its transaction; a
    # later migration that alters a table (quality.0003) may not run with them pending.
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()  # what is applied now, for the next call
    return executor


def _latest() -> list[tuple[str, str | None]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _tables() -> dict[str, list[tuple[Any, ...]]]:
    with connection.cursor() as cursor:
        rows = {}
        for table in TABLES:
            cursor.execute(f"SELECT * FROM {table} ORDER BY 1")  # noqa: S608 - our constants
            rows[table] = cursor.fetchall()
        return rows


@pytest.fixture
def back_to_latest() -> Iterator[None]:
    """Whatever happens, the test database ends at the latest migrations, its caches fresh."""
    yield
    _migrate(_latest())
    ContentType.objects.clear_cache()


def _old_rows(apps: Apps, owner: User) -> dict[str, int]:
    """Rows made with the models as they were before the move (`retrieval.EvalCase`)."""
    Collection = apps.get_model("retrieval", "Collection")
    Document = apps.get_model("retrieval", "Document")
    Conversation = apps.get_model("conversations", "Conversation")
    Message = apps.get_model("conversations", "Message")
    OldCase = apps.get_model("retrieval", "EvalCase")
    OldRun = apps.get_model("retrieval", "EvaluationRun")
    Permission = apps.get_model("auth", "Permission")
    OldGroup = apps.get_model("auth", "Group")

    collection = Collection.objects.get(slug="company")
    conversation = Conversation.objects.create(owner_id=owner.pk, title="")
    message = Message.objects.create(conversation=conversation, role="user", text="regra do VR")
    case = OldCase.objects.create(
        collection=collection,
        question="regra do VR no home",
        category="standalone",
        source_message=message,
        created_by_id=owner.pk,
    )
    case.relevant_documents.set(Document.objects.filter(external_id__in=RIGHT))
    run = OldRun.objects.create(
        collection=collection,
        source="cases",
        source_label="cases",
        modes=["rules"],
        ks=[5, 10],
        status="done",
        report={"modes": {"rules": {"overall": {"mrr@10": 0.9}}}},
        created_by_id=owner.pk,
    )
    group = OldGroup.objects.create(name="quality-staff")
    group.permissions.add(
        Permission.objects.get(content_type__app_label="retrieval", codename="use_playground"),
        Permission.objects.get(content_type__app_label="retrieval", codename="add_evalcase"),
    )
    return {"case": case.pk, "run": run.pk, "message": message.pk, "group": group.pk}


def test_the_move_changes_no_row_and_keeps_the_rights_granted(
    small_kb: Any, personas: dict[str, User], back_to_latest: None
) -> None:
    executor = _migrate([BEFORE, ("quality", None)])
    made = _old_rows(executor.loader.project_state(BEFORE).apps, personas["rita"])
    before = _tables()
    assert all(before.values())

    with CaptureQueriesContext(connection) as statements:
        _migrate([MOVED])
    sql = [s["sql"] for s in statements]
    assert not [s for s in sql if any(table in s for table in TABLES)]
    assert not [s for s in sql if re.match(r"\s*(CREATE|ALTER|DROP)\b", s, re.IGNORECASE)]
    assert _tables() == before

    _migrate(_latest())  # what came after the move (quality.0003 adds a column)
    ContentType.objects.clear_cache()
    case = EvalCase.objects.get(pk=made["case"])
    assert sorted(d.external_id for d in case.relevant_documents.all()) == sorted(RIGHT)
    assert case.source_message_id == made["message"] and case.created_by == personas["rita"]
    run = EvaluationRun.objects.get(pk=made["run"])
    assert run.ks == [5, 10] and run.report["modes"]["rules"]["overall"]["mrr@10"] == 0.9
    # The content types moved with the models: the permissions granted before still hold.
    carlos = User.objects.get(pk=personas["carlos"].pk)
    carlos.groups.add(Group.objects.get(pk=made["group"]))
    carlos = User.objects.get(pk=carlos.pk)  # no permission cache
    assert carlos.has_perm("quality.use_playground") and carlos.has_perm("quality.add_evalcase")
    assert not ContentType.objects.filter(app_label="retrieval", model="evalcase").exists()

    # And back: the knowledge base takes them over again, still without a row changed.
    _migrate([BEFORE, ("quality", None)])
    assert _tables() == before


def test_the_models_and_their_migrations_agree() -> None:
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_the_fidelity_review_table_comes_and_goes_with_its_migration(
    personas: dict[str, User], back_to_latest: None
) -> None:
    """`quality.0005` is reversible: back to 0004 drops its table, forward makes it again."""

    def tables() -> set[str]:
        with connection.cursor() as cursor:
            return set(connection.introspection.table_names(cursor))

    assert "quality_rewritefidelity" in tables()
    _migrate([("quality", "0004_promotion_gate")])
    assert "quality_rewritefidelity" not in tables()
    _migrate(_latest())
    assert "quality_rewritefidelity" in tables()
    item = RewriteFidelity.objects.create(policy="rules-x")
    assert RewriteFidelity.objects.get(pk=item.pk).verdict == "pending"
