"""The fault tests' embedding server and worker fixtures, shared with the split-job tests."""

from tests.retrieval.ingestion.test_job_faults import (  # noqa: F401 (fixtures by name)
    embedding_server,
    remote_embedder,
    workers,
)
