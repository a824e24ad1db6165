"""Admin for the knowledge base: collections, documents and ingestion, the glossary.

`base` holds what every admin class of the apps shares (conversations' quality pages too).
"""

from retrieval.admin.documents import CollectionAdmin, DocumentAdmin, IngestionJobAdmin
from retrieval.admin.glossary import GlossaryEntryAdmin

__all__ = [
    "CollectionAdmin",
    "DocumentAdmin",
    "GlossaryEntryAdmin",
    "IngestionJobAdmin",
]
