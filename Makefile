# make setup   create .venv (train env) and .venv-scorer (scorer env) from the pinned files
# make test    setup if needed, then every test (train env, scorer env, Slurm dev cluster)
# make bench   benchmarks (print numbers; see benches/RESULTS.md)
PYTHON ?= python3.11
VENV := .venv
SCORER_VENV := .venv-scorer
PIP_FLAGS ?= --disable-pip-version-check -q

.PHONY: setup test test-train test-scorer bench clean-envs

setup: $(VENV)/.installed $(SCORER_VENV)/.installed

# torch first: the CPU build from the local wheel; with it present, verl's torch range is met
# and pip does not fetch the multi-GB CUDA build
$(VENV)/.installed: envs/requirements-train.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(VENV)/bin/pip install $(PIP_FLAGS) torch==2.13.0
	$(VENV)/bin/pip install $(PIP_FLAGS) -r envs/requirements-train.txt
	touch $@

$(SCORER_VENV)/.installed: envs/requirements-scorer.txt
	$(PYTHON) -m venv $(SCORER_VENV)
	$(SCORER_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(SCORER_VENV)/bin/pip install $(PIP_FLAGS) torch==2.13.0 "setuptools<81"
	$(SCORER_VENV)/bin/pip install $(PIP_FLAGS) -r envs/requirements-scorer.txt
	touch $@

test: setup
	$(SCORER_VENV)/bin/python -m pytest tests/scorer -q
	$(VENV)/bin/python -m pytest tests -q --ignore=tests/scorer

bench: setup
	$(VENV)/bin/python benches/plan.py
	$(SCORER_VENV)/bin/python benches/scorer.py

clean-envs:
	rm -rf $(VENV) $(SCORER_VENV)
