"""Development only: what `make`, the scripts and the tests use, never the product.

- `db`: the embedded PostgreSQL with pgvector (`python -m chatrag.dev.db start|stop|status|url`);
- `server`: `make run`'s web server and worker, and the command line every daphne of ours uses;
- `fakemodel`: a fake chat-model server speaking Ollama's and OpenAI's wire formats;
- `fakes`: deterministic backend fakes chosen by dotted path (`HashingEmbedder`).

Nothing of the apps or of the production wiring imports this package (an import-linter
contract); settings read where the embedded database listens, in debug only.
"""
