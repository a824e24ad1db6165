"""Admin for the knowledge base: documents and ingestion, glossary, retrieval quality."""

from retrieval.admin.documents import CollectionAdmin, DocumentAdmin, IngestionJobAdmin
from retrieval.admin.glossary import GlossaryEntryAdmin
from retrieval.admin.quality import EvalCaseAdmin, EvaluationRunAdmin

__all__ = [
    "CollectionAdmin",
    "DocumentAdmin",
    "EvalCaseAdmin",
    "EvaluationRunAdmin",
    "GlossaryEntryAdmin",
    "IngestionJobAdmin",
]
