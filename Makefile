# `make help` lists the targets; docs/setup.md ("The make targets") says what each does and costs.
PY := .venv/bin/python
# Relative folders are made absolute once, so every process a target starts sees the folder the user meant.
PSPO_DATA_DIR ?= ../shared/data
override PSPO_DATA_DIR := $(abspath $(PSPO_DATA_DIR))
export PSPO_DATA_DIR
ifneq ($(PSPO_RESULTS_DIR),)
override PSPO_RESULTS_DIR := $(abspath $(PSPO_RESULTS_DIR))
export PSPO_RESULTS_DIR
endif
ifneq ($(PSPO_LOG_DIR),)
override PSPO_LOG_DIR := $(abspath $(PSPO_LOG_DIR))
export PSPO_LOG_DIR
endif
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: env test test-fast lint mini study leaderboard scale bench rehearse env-vllm test-vllm env-authors test-authors help

env: ## build .venv if missing, and byte-compile the project (no .pyc is written where PYTHONDONTWRITEBYTECODE is set)
	@bash scripts/setup_env.sh
	@$(PY) -m compileall -q pspo_repro hydra_plugins scripts > /dev/null

# The Slurm tests share one worker (tests/conftest.py) and mostly wait; PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 3
PYTEST_ARGS := -n $(PYTEST_WORKERS) --dist loadgroup

test: env ## ruff check, ruff format --check and the test suite (not the vLLM or authors' stack tests)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -m "not vllm and not authors" $(PYTEST_ARGS)

test-fast: env ## the test suite without the slow tier
	$(PY) -m pytest -q -m "not slow and not vllm and not authors" $(PYTEST_ARGS)

lint: env ## ruff check and ruff format --check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

mini: env ## the CPU mini-reproduction end to end (docs/mini.md); extra settings: MINI_ARGS='...'
	$(PY) -m pspo_repro.mini $(MINI_ARGS)

study: env ## the claims study (results/study/claims.md, conf/pipeline/study.yaml); extra: STUDY_ARGS='...'
	$(PY) -m pspo_repro.mini pipeline=study $(STUDY_ARGS)

leaderboard: env ## the policy-loss leaderboard (docs/leaderboard.md, conf/pipeline/leaderboard.yaml); extra: LEADERBOARD_ARGS='...'
	$(PY) -m pspo_repro.mini pipeline=leaderboard $(LEADERBOARD_ARGS)

scale: env ## the model-size ladder (docs/scale.md, conf/scale.yaml); extra: SCALE_ARGS='...' (only=[]: the table only)
	$(PY) -m pspo_repro.scale $(SCALE_ARGS)

rehearse: env ## the real-size rehearsal at Qwen2.5-0.5B's architecture (scripts/rehearse.py); extra: REHEARSE_ARGS='...'
	$(PY) scripts/rehearse.py $(REHEARSE_ARGS)

bench: env ## the three benchmarks of docs/benchmarks.md (method ratios, training step vs TRL, batched evaluation)
	$(PY) scripts/bench_methods.py
	$(PY) scripts/bench_train_step.py
	$(PY) scripts/bench_eval.py

VLLM_PY := .venv-vllm/bin/python
env-vllm: ## build .venv-vllm, the real vLLM engine on CPU (docs/vllm.md)
	@bash scripts/setup_vllm_env.sh

# In-process engine, small KV cache: it starts fast and leaves the machine's memory alone (docs/vllm.md).
test-vllm: env-vllm ## the vLLM engine's tests in .venv-vllm (not part of make test)
	VLLM_ENABLE_V1_MULTIPROCESSING=$${VLLM_ENABLE_V1_MULTIPROCESSING:-0} \
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} \
	$(VLLM_PY) -m pytest -q -m vllm tests/evaluation/test_vllm_engine.py

env-authors: ## build .venv-authors, the stack the paper ran with the PSPO authors' patches (docs/reproduction.md)
	@bash scripts/setup_authors_env.sh

test-authors: env env-authors ## our trainer against the authors' stack (not part of make test)
	$(PY) -m pytest -q -p no:xdist -m authors tests/training/test_authors_stack_parity.py

help: ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
