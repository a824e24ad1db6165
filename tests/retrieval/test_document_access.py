"""The one document-permission rule in its ORM form, and the scope shared by two readers."""

from __future__ import annotations

from dataclasses import replace
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


# Every persona the rule knows, and the documents each must read (by title word).
READS = {
    "ana": {"public"},  # no group
    "rita": {"public", "hr", "both"},
    "carlos": {"public", "sales", "both"},
    "boss": {"public", "hr", "sales", "both"},  # superuser
    "leaver": {"public"},  # was in HR, removed from the group
    "inactive": set(),  # in HR, but deactivated
    "inactive_boss": set(),
    "anonymous": set(),
}


@pytest.mark.django_db(transaction=True)
def test_the_three_forms_of_the_rule_agree_on_every_persona(personas: dict[str, Any]) -> None:
    """Python (`Reader.can_read`), the search and vocabulary SQL, and the ORM read alike."""
    from django.contrib.auth.models import AnonymousUser

    from retrieval.access import reader_for
    from retrieval.embeddings import get_embedder
    from retrieval.ingestion.chunking import Section
    from retrieval.ingestion.services import SourceDocument, documents_ingest
    from retrieval.pipeline.search import SearchRequest
    from retrieval.services import scope_for_user, search_engine, search_params, vocabulary_df

    collection = default_collection()
    groups = {
        "public": (),
        "hr": (RESTRICTED,),
        "sales": ("vendas",),
        "both": (RESTRICTED, "vendas"),
    }
    sources = [
        SourceDocument(
            external_id=name,
            title=name,
            sections=(Section("", f"Documento {name}: palavra zq{name}xv sobre férias."),),
            groups=names,
        )
        for name, names in groups.items()
    ]
    report = documents_ingest(collection=collection, sources=sources, embedder=get_embedder())
    assert not report.errors, report.errors
    hr = Group.objects.get(name=RESTRICTED)
    leaver = User.objects.create_user("leaver", password="pw-leaver-123")
    leaver.groups.add(hr)
    assert reader_for(leaver) is not None and hr.id in reader_for(leaver).group_ids  # type: ignore[union-attr]
    leaver.groups.remove(hr)
    inactive = User.objects.create_user("inactive", password="pw-inactive-123", is_active=False)
    inactive.groups.add(hr)
    users: dict[str, Any] = {
        **personas,
        "boss": User.objects.create_superuser("boss", password="pw-boss-123"),
        "leaver": leaver,
        "inactive": inactive,
        "inactive_boss": User.objects.create_superuser(
            "inactive_boss", password="pw-boss-456", is_active=False
        ),
        "anonymous": AnonymousUser(),
    }
    document_groups = {
        d.external_id: set(d.groups.values_list("id", flat=True))
        for d in Document.objects.filter(collection=collection)
    }
    vector = get_embedder().embed_queries(["férias"])[0]
    params = replace(search_params(), vector_candidates=50, limit=50)
    words = [f"zq{name}xv" for name in groups]

    for name, user in users.items():
        orm = set(
            documents_readable(user=user)
            .filter(collection=collection)
            .values_list("external_id", flat=True)
        )
        reader = reader_for(user)
        python = {d for d, ids in document_groups.items() if reader and reader.can_read(ids)}
        assert orm == python == READS[name], name
        if reader is None:
            with pytest.raises(PermissionError):
                scope_for_user(user=user, collection=collection)
            continue
        scope = scope_for_user(user=user, collection=collection)
        assert scope.reader == reader, name
        hits = search_engine().search(SearchRequest("férias", vector), scope, params)
        assert {h.external_id for h in hits} == READS[name], name
        counted = vocabulary_df(scope=scope, words=words)
        assert {w[2:-2] for w in counted} == READS[name], name
