# make setup   create .venv (train env) and .venv-scorer (scorer env) from the CPU locks in envs/lock/
# make test    setup if needed, then every test (train env, scorer env, Slurm dev cluster)
# make bench   benchmarks (print numbers; see benches/RESULTS.md)
# make locks   re-resolve envs/lock/ from envs/*.in (envs/lock.sh; registry metadata only)
PYTHON ?= python3.11
VENV := .venv
SCORER_VENV := .venv-scorer
PIP_FLAGS ?= --disable-pip-version-check -q
# the CPU locks pin torch==2.13.0+cpu, a build PyPI does not serve: pip takes it from this folder
TORCH_CPU_WHEELS ?= /opt/wheels

.PHONY: setup test test-train test-scorer bench clean-envs locks

setup: $(VENV)/.installed $(SCORER_VENV)/.installed

$(VENV)/.installed: envs/lock/train-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(VENV)/bin/pip install $(PIP_FLAGS) --find-links $(TORCH_CPU_WHEELS) -r envs/lock/train-cpu.txt
	touch $@

$(SCORER_VENV)/.installed: envs/lock/scorer-cpu.txt
	$(PYTHON) -m venv $(SCORER_VENV)
	$(SCORER_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(SCORER_VENV)/bin/pip install $(PIP_FLAGS) --find-links $(TORCH_CPU_WHEELS) -r envs/lock/scorer-cpu.txt
	touch $@

locks:
	envs/lock.sh

test: setup
	$(SCORER_VENV)/bin/python -m pytest tests/scorer -q
	$(VENV)/bin/python -m pytest tests -q --ignore=tests/scorer

bench: setup
	$(VENV)/bin/python benches/plan.py
	$(SCORER_VENV)/bin/python benches/scorer.py

clean-envs:
	rm -rf $(VENV) $(SCORER_VENV)
