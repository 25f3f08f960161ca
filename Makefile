# Two entry points (see README): `make report` and `make test`. Both create the venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= all

.PHONY: setup report test lock clean
setup: $(VENV)/.installed .dvc/plots/offline.html

$(VENV)/.installed: envs/requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r envs/requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# the page `dvc plots show` fills in, with Vega inlined: it draws without a network (.dvc/config.local names it)
.dvc/plots/offline.html: $(VENV)/.installed
	$(BIN)/python -m pipeline_src plots-offline >/dev/null

# The default benchmark, offline, to results/report.html.
report: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" snakemake --cores $(CORES)

# The test suite (uses ../shared/corpora, or $$LMBENCH_MIRROR, as the offline corpus mirror), one pytest-xdist
# worker per core (TEST_WORKERS=0: in this process); a worker that is free takes tests from a busy one. The 20
# slowest tests are listed at the end (where CI's time goes).
TEST_WORKERS ?= auto
test: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=20

# Regenerate the lock from the current venv, then the conda environment from the lock.
lock: setup
	( head -2 envs/requirements.lock; $(BIN)/python -m pip freeze --exclude-editable \
	  | grep -v -i '^pipeline.src' | sed 's/^torch==\(.*\)+cpu$$/torch==\1/' ) > envs/requirements.lock.new
	mv envs/requirements.lock.new envs/requirements.lock
	$(BIN)/python envs/make_conda_env.py

clean:
	rm -rf $(VENV)
