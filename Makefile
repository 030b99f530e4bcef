# The README's two set-up commands are `make mini` (the main job) and `make test`; both create .venv.
PY := .venv/bin/python
export PSPO_DATA_DIR ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: env test test-fast lint mini bench

env:
	@bash scripts/setup_env.sh

test: env
	$(PY) -m ruff check .
	$(PY) -m pytest -q

test-fast: env
	$(PY) -m pytest -q -m "not slow"

lint: env
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

mini: env
	$(PY) scripts/bench_methods.py

bench: env
	$(PY) scripts/bench_methods.py
