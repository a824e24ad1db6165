"""Who may read which document: the permission rule's one home.

The rule: a document without groups is public, one with groups is readable by their members,
and a superuser reads everything; anonymous and inactive users read nothing. `reader_for` is
the only place that looks at a user's flags and groups. What it returns (a pure `Reader`) has
the rule's three forms: `Reader.can_read` in Python, `readable_sql` in the search's SQL (via
`retrieval.services.scope_for_user`), and `documents_readable` here for the ORM (the chat's
document page, the admin and the review pages).

Staff pages show what a stored turn or an evaluation retrieved. For a document the staff
member may not read they show a placeholder instead of its title, id and passages, and an
answer written from it is not shown at all (see `DocumentAccess`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Exists, OuterRef, QuerySet
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from retrieval.models import Collection, Document
from retrieval.pipeline.search import Reader

RESTRICTED_DOCUMENT: Promise = _("[restricted document]")
RESTRICTED_PASSAGE: Promise = _("[restricted passage]")


def reader_for(user: User | AnonymousUser) -> Reader | None:
    """What this user reads by the rule; None when they read nothing (anonymous, inactive)."""
    if not user.is_authenticated or not user.is_active:
        return None
    assert isinstance(user, User)
    if user.is_superuser:
        return Reader(everything=True)
    return Reader(group_ids=tuple(sorted(user.groups.values_list("id", flat=True))))


def documents_readable(
    *, user: User | AnonymousUser, documents: QuerySet[Document] | None = None
) -> QuerySet[Document]:
    """The documents this user may read: the rule's ORM form (`Reader.can_read` in SQL).

    `documents` narrows a queryset of the caller's (the admin's). No join on the groups
    (`Exists`), so the queryset can be annotated and counted as is.
    """
    return documents_readable_by(reader_for(user), documents)


def documents_readable_by(
    reader: Reader | None, documents: QuerySet[Document] | None = None
) -> QuerySet[Document]:
    """The documents `reader` may read (None reads nothing), of `documents` or of all."""
    documents = Document.objects.all() if documents is None else documents
    if reader is None:
        return documents.none()
    if reader.everything:
        return documents
    links = Document.groups.through.objects.filter(document_id=OuterRef("pk"))
    shared = links.filter(group_id__in=reader.group_ids)
    return documents.filter(~Exists(links) | Exists(shared))


@dataclass(frozen=True)
class DocumentAccess:
    """Which documents of a page one viewer may read, resolved in one query.

    Documents are named as the stored traces name them: by primary key (sources) or by
    external id in the chat's collection (hits). A document that is not there any more
    cannot have its groups checked and counts as unreadable (fail closed), except for a
    superuser, who reads everything.
    """

    everything: bool
    ids: frozenset[int] = frozenset()
    external_ids: frozenset[str] = frozenset()

    def can_read(self, *, document_id: object = None, external_id: object = None) -> bool:
        if self.everything:
            return True
        if document_id is not None:
            return _as_int(document_id) in self.ids
        if external_id is not None:
            return str(external_id) in self.external_ids
        return False

    def title(self, title: str, *, document_id: object = None, external_id: object = None) -> str:
        """The title, or the placeholder for a document the viewer may not read."""
        if self.can_read(document_id=document_id, external_id=external_id):
            return title
        return str(RESTRICTED_DOCUMENT)

    def external_id(self, external_id: str) -> str:
        """The document's id (a path that names it), or the placeholder."""
        return external_id if self.can_read(external_id=external_id) else str(RESTRICTED_DOCUMENT)


def document_access(
    *,
    user: User | AnonymousUser,
    collection: Collection,
    document_ids: Iterable[object] = (),
    external_ids: Iterable[object] = (),
) -> DocumentAccess:
    """What this viewer may read among these documents (by pk, or by external id)."""
    reader = reader_for(user)
    if reader is not None and reader.everything:
        return DocumentAccess(everything=True)
    ids = {i for i in (_as_int(d) for d in document_ids) if i is not None}
    names = {str(e) for e in external_ids if e is not None}
    if not ids and not names:
        return DocumentAccess(everything=False)
    readable = documents_readable_by(reader)
    return DocumentAccess(
        everything=False,
        ids=frozenset(readable.filter(pk__in=ids).values_list("pk", flat=True))
        if ids
        else frozenset(),
        external_ids=frozenset(
            readable.filter(collection=collection, external_id__in=names).values_list(
                "external_id", flat=True
            )
        )
        if names
        else frozenset(),
    )


def titles_unreadable(
    *, user: User | AnonymousUser, collection: Collection, titles: Iterable[str]
) -> frozenset[str]:
    """Those of `titles` that only documents of this collection the user may not read have.

    For titles met as text, not as a document (a clarification's options, which the trace
    keeps whole whether or not their pages are among its stored hits). A title that a
    document the user may read also has stays readable: replacing it would tell that a
    restricted document is titled so too.
    """
    wanted = {t.strip() for t in titles if t and t.strip()}
    reader = reader_for(user)
    if not wanted or (reader is not None and reader.everything):
        return frozenset()
    same = Document.objects.filter(collection=collection, title__in=wanted)
    readable = set(documents_readable_by(reader, same).values_list("title", flat=True))
    return frozenset(set(same.values_list("title", flat=True)) - readable)


def external_ids_unreadable(
    *,
    user: User | AnonymousUser,
    collection: Collection,
    readable_by: User | AnonymousUser | None = None,
) -> frozenset[str]:
    """The ids of this collection's documents the user may not read (none for a superuser).

    For free text that names documents by id (the rewrite's notes: "the turn alone finds
    'pt/…' confidently"), which may name one that is in no stored hit of the conversation.
    `readable_by` (the conversation's owner) keeps only the documents that person may read:
    their turns can name no other. Without it, a staff member who typed a guessed id into
    their own chat saw it replaced on their own timeline exactly when a document they may
    not read had that id (ids are file names: "rh/demissao-fulano").
    """
    reader = reader_for(user)
    if reader is not None and reader.everything:
        return frozenset()
    readable = documents_readable_by(reader).values("pk")
    unreadable = Document.objects.filter(collection=collection).exclude(pk__in=readable)
    if readable_by is not None:
        unreadable = unreadable.filter(
            pk__in=documents_readable_by(reader_for(readable_by)).values("pk")
        )
    return frozenset(unreadable.values_list("external_id", flat=True))


def replace_folded(text: str, old: str, new: str) -> str:
    """Replace `old` in `text` ignoring case (titles are matched the way answers quote them)."""
    folded, target = text.casefold(), old.casefold()
    if len(folded) != len(text):  # casefold changed lengths (ß → ss): hide the whole text
        return new
    out, start = [], 0
    while (found := folded.find(target, start)) >= 0:
        out.append(text[start:found])
        out.append(new)
        start = found + len(target)
    out.append(text[start:])
    return "".join(out)


def titles_scrubbed(text: str, titles: Iterable[str]) -> str:
    """`text` with each of these titles replaced by the restricted-document placeholder."""
    for title in sorted({t for t in titles if t.strip()}, key=len, reverse=True):
        if title.casefold() in text.casefold():
            text = replace_folded(text, title, str(RESTRICTED_DOCUMENT))
    return text


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
