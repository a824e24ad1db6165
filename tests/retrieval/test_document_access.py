"""The one document-permission rule in its ORM form, and the scope shared by two readers."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from retrieval.access import document_access, documents_readable
from retrieval.models import Document
from retrieval.pipeline.search import Scope
from retrieval.services import default_collection, scope_common
from tests.conftest import RESTRICTED


def test_scope_common_is_at_most_what_both_may_read() -> None:
    everything = Scope(collection_id=1, see_everything=True)
    hr, sales = Scope(collection_id=1, group_ids=(1, 2)), Scope(collection_id=1, group_ids=(2, 3))
    assert scope_common(everything, hr) == hr and scope_common(hr, everything) == hr
    assert scope_common(hr, sales) == Scope(collection_id=1, group_ids=(2,))
    assert scope_common(everything, everything).see_everything
    with pytest.raises(ValueError, match="collections"):
        scope_common(hr, Scope(collection_id=2))


@pytest.mark.django_db
def test_documents_readable_is_the_chat_rule(personas: dict[str, Any]) -> None:
    collection = default_collection()
    salary = Document.objects.create(collection=collection, external_id="s", title="S", checksum="")
    salary.groups.add(Group.objects.get(name=RESTRICTED), Group.objects.get(name="vendas"))
    public = Document.objects.create(collection=collection, external_id="p", title="P", checksum="")
    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    assert set(documents_readable(user=personas["ana"])) == {public}
    assert set(documents_readable(user=personas["rita"])) == {public, salary}
    assert set(documents_readable(user=personas["carlos"])) == {public, salary}
    assert set(documents_readable(user=boss)) == {public, salary}
    # Two groups, both held: still one row (no join to count twice).
    personas["rita"].groups.add(Group.objects.get(name="vendas"))
    assert documents_readable(user=personas["rita"]).filter(pk=salary.pk).count() == 1
    access = document_access(
        user=personas["ana"], collection=collection, external_ids=["s", "p", "gone"]
    )
    assert access.external_id("p") == "p"
    assert access.external_id("s") == access.external_id("gone") == "[restricted document]"
