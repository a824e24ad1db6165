"""What the model backends share: `http`, the plumbing of every HTTP backend.

The backends themselves stay where settings name them by dotted path:
`retrieval.pipeline.llm` (chat models) and `retrieval.embeddings` (embedders).
"""
