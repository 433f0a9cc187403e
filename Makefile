# make setup       create .venv (train env) and .venv-scorer (scorer env) from the locks in envs/lock/, with uv:
#                  the GPU locks where `nvidia-smi -L` lists a GPU, the CPU locks elsewhere (docs/environments.md);
#                  on CPU also .venv-loop, the CPU loop env (verl + vLLM's CPU build: accelerator=cpu)
#   PLATFORM=gpu|cpu      force one platform's locks
#   FLASH_ATTN=1          GPU only: also build flash-attn 2.8.3 (needs nvcc; about an hour of compiling)
#   WHEELHOUSE=DIR        install from DIR alone, no index at all (a compute node without internet)
#   VENV=DIR SCORER_VENV=DIR LOOP_VENV=DIR   where the environments go (default .venv, .venv-scorer, .venv-loop)
# make wheelhouse PLATFORM=gpu|cpu WHEELHOUSE=DIR [PYTHON_VERSION=3.x]
#                  download every wheel of that platform's locks, for that platform and Python, into DIR
#                  (on a machine with internet; PLATFORM is the compute node's, never guessed here)
# make test        setup if needed, then every test (train env, scorer env, Slurm dev cluster), on every core
#   PYTEST_ARGS=...       pytest's options instead of the default (e.g. PYTEST_ARGS=-q for one process)
# make bench       benchmarks (print numbers; see benches/RESULTS.md)
# make locks       re-resolve envs/lock/ from envs/*.in (envs/lock.sh; registry metadata only)
PYTHON ?= python3.11
VENV ?= .venv
SCORER_VENV ?= .venv-scorer
LOOP_VENV ?= .venv-loop
# the pinned uv (envs/uv.sh holds the version; installs it on first use)
UV := envs/uv.sh
# the CPU locks pin torch==2.13.0+cpu, a build PyPI does not serve: uv takes it from this folder
TORCH_CPU_WHEELS ?= /opt/wheels

# PLATFORM: given on the command line, or this node's (a GPU listed by nvidia-smi -> gpu). An environment
# variable of that common name is not taken as a choice.
ifneq ($(origin PLATFORM),command line)
PLATFORM := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo gpu || echo cpu)
endif
ifeq ($(filter $(PLATFORM),gpu cpu),)
$(error error: PLATFORM=$(PLATFORM) is not a platform; use PLATFORM=gpu or PLATFORM=cpu)
endif
ifneq ($(FLASH_ATTN),)
ifneq ($(PLATFORM),gpu)
$(error error: FLASH_ATTN=1 builds flash-attn for CUDA; it needs PLATFORM=gpu (this run has PLATFORM=$(PLATFORM)))
endif
endif

TRAIN_LOCK ?= envs/lock/train-$(PLATFORM).txt
SCORER_LOCK ?= envs/lock/scorer-$(PLATFORM).txt
# CPU machines only: the env accelerator=cpu trains in (envs/loop-cpu.in says why it is a third one)
LOOP_LOCK ?= envs/lock/loop-cpu.txt
FLASH_ATTN_LOCK := envs/lock/train-gpu-flash-attn.txt
TRAIN_LOCKS := $(strip $(TRAIN_LOCK) $(if $(FLASH_ATTN),$(FLASH_ATTN_LOCK)))

# where packages come from: the wheelhouse alone, or the index (PyPI) plus, on CPU, the torch CPU wheel folder
ifneq ($(WHEELHOUSE),)
SOURCE := --no-index --find-links $(WHEELHOUSE)
else
SOURCE := $(if $(filter cpu,$(PLATFORM)),--find-links $(TORCH_CPU_WHEELS))
endif

# An env's .installed holds the locks it was synced to: another lock set (a PLATFORM or FLASH_ATTN change,
# a lock edit) re-syncs it. `uv pip sync` makes the env exactly the lock: anything else is removed.
ifneq ($(shell cat $(VENV)/.installed 2>/dev/null),$(TRAIN_LOCKS))
.PHONY: $(VENV)/.installed
endif
ifneq ($(shell cat $(SCORER_VENV)/.installed 2>/dev/null),$(SCORER_LOCK))
.PHONY: $(SCORER_VENV)/.installed
endif
ifneq ($(shell cat $(LOOP_VENV)/.installed 2>/dev/null),$(LOOP_LOCK))
.PHONY: $(LOOP_VENV)/.installed
endif

.PHONY: setup wheelhouse test test-fast test-train test-scorer bench clean-envs locks

setup: $(VENV)/.installed $(SCORER_VENV)/.installed $(if $(filter cpu,$(PLATFORM)),$(LOOP_VENV)/.installed)

# uv itself comes from the wheelhouse too when there is one (envs/uv.sh)
UV_ENV := $(if $(WHEELHOUSE),WHEELHOUSE=$(WHEELHOUSE) )

# FLASH_ATTN=1: after the default GPU lock, the opt-in lock, which adds flash-attn alone (envs/check_locks.py);
# it builds against the torch just installed (its setup.py imports torch), with nvcc, so without build
# isolation. MAX_JOBS caps the parallel nvcc jobs (~9 GB of RAM each). FORCE_BUILD: its setup.py would
# otherwise fetch a prebuilt wheel from GitHub built for CUDA 12, while this torch is CUDA 13.
$(VENV)/.installed: $(TRAIN_LOCKS)
	@rm -f $@
	$(UV_ENV)$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip sync --compile-bytecode --python $(VENV)/bin/python $(SOURCE) $(TRAIN_LOCK)
ifneq ($(FLASH_ATTN),)
	FLASH_ATTENTION_FORCE_BUILD=TRUE $(UV) pip install --python $(VENV)/bin/python $(SOURCE) \
	  --no-build-isolation-package flash-attn -r $(FLASH_ATTN_LOCK)
endif
	echo "$(TRAIN_LOCKS)" > $@

$(SCORER_VENV)/.installed: $(SCORER_LOCK)
	@rm -f $@
	$(UV_ENV)$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SCORER_VENV)
	$(UV) pip sync --compile-bytecode --python $(SCORER_VENV)/bin/python $(SOURCE) $(SCORER_LOCK)
	echo "$(SCORER_LOCK)" > $@

$(LOOP_VENV)/.installed: $(LOOP_LOCK)
	@rm -f $@
	$(UV_ENV)$(UV) venv --quiet --allow-existing --python $(PYTHON) $(LOOP_VENV)
	$(UV) pip sync --compile-bytecode --python $(LOOP_VENV)/bin/python $(SOURCE) $(LOOP_LOCK)
	echo "$(LOOP_LOCK)" > $@

# PYTHON_VERSION (command line only: Python images export one): the compute node's Python, when it is not
# the one the locks are resolved for (envs/lock.sh)
WHEEL_PYTHON := $(if $(filter command line,$(origin PYTHON_VERSION)),$(PYTHON_VERSION))
# PLATFORM is the compute node's, so it is not guessed from this machine (a login node, often GPU-less).
# FLASH_ATTN=1 adds flash-attn's sdist, which `make setup FLASH_ATTN=1 WHEELHOUSE=DIR` compiles on the node.
wheelhouse:
ifneq ($(origin PLATFORM),command line)
	$(error error: make wheelhouse needs PLATFORM=gpu or PLATFORM=cpu, the compute node's platform)
endif
ifeq ($(WHEELHOUSE),)
	$(error error: make wheelhouse needs WHEELHOUSE=DIR, the folder to download the wheels into)
endif
	$(PYTHON) envs/wheelhouse.py --platform $(PLATFORM) --dest $(WHEELHOUSE) \
	  $(if $(WHEEL_PYTHON),--python-version $(WHEEL_PYTHON)) \
	  $(if $(filter cpu,$(PLATFORM)),--find-links $(TORCH_CPU_WHEELS)) \
	  $(if $(FLASH_ATTN),--sdists-of $(FLASH_ATTN_LOCK)) $(TRAIN_LOCK) $(SCORER_LOCK) \
	  $(if $(filter cpu,$(PLATFORM)),$(LOOP_LOCK))

locks:
	envs/lock.sh

# every test, on every core: whole modules per xdist worker, the slowest groups handed out first
# (tests/scheduling.py); one worker more than cores, as the Slurm group mostly waits for its jobs.
# The 25 slowest tests and seconds per test directory (tests/durations.py) close each run's output,
# so CI logs show where the time went (docs/testing.md has the budget)
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_ARGS ?= -q -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25
# Python's compiled modules kept in __pycache__, as on a machine that does not set PYTHONDONTWRITEBYTECODE (this
# project's CI image sets it): otherwise every pytest worker rewrites every test module's asserts again (3.5 CPU-s of
# each worker's 9 s collection) and every launch's processes compile the checkout's src/ again
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE
test: setup
	$(TEST_ENV) $(SCORER_VENV)/bin/python -m pytest tests/scorer $(PYTEST_ARGS)
	$(TEST_ENV) $(VENV)/bin/python -m pytest tests --ignore=tests/scorer $(PYTEST_ARGS)

# the inner loop of development: every test that starts no training launch, Slurm job or Ray cluster
# (tests/tiers.py HEAVY), a few minutes; CI runs `make test`
test-fast: setup
	$(TEST_ENV) $(SCORER_VENV)/bin/python -m pytest tests/scorer $(PYTEST_ARGS) --tier fast
	$(TEST_ENV) $(VENV)/bin/python -m pytest tests --ignore=tests/scorer $(PYTEST_ARGS) --tier fast

bench: setup
	$(VENV)/bin/python benches/plan.py
	$(SCORER_VENV)/bin/python benches/scorer.py

clean-envs:
	rm -rf $(VENV) $(SCORER_VENV) $(LOOP_VENV)
