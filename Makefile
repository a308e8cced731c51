# Two commands set everything up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# The exact versions installed: requirements.lock (the runtime) and requirements-test.lock (the same pins and the
# test and bench extras), both written from pyproject.toml by `make lock`.
LOCKS := requirements.lock requirements-test.lock
STAMP := $(VENV)/.installed-$(shell cat $(LOCKS) pyproject.toml | sha256sum | cut -c1-12)

# Local state lives in the repo (git-ignored); the built base model is cached apart so a demo reset keeps it.
export FTPIPE_HOME ?= $(CURDIR)/.ftpipe
export DAGSTER_HOME ?= $(FTPIPE_HOME)/dagster_home
# The instance config copied into DAGSTER_HOME: docs/deploy/dagster.postgres.yaml for Postgres storage.
FTPIPE_DAGSTER_YAML ?= dagster.yaml
export FTPIPE_MODEL_CACHE ?= $(CURDIR)/.cache/models
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install lock base-model dagster-home demo lint test test-fast test-kernels ui daemon api clean

install: $(STAMP)

$(STAMP): $(LOCKS) pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# torch first, pinned, so that no other package can pull a CUDA build of it
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -r requirements.lock -r requirements-test.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

# Rewrites both locks with pip-compile (pip-tools, in a venv of its own under .cache, never .venv), the commands
# their headers record. pip-compile resolves through pip and its configuration, as make install does, so torch is
# the CPU build (found through pip's find-links) and no nvidia-* package enters; the configured index
# and find-links are left out of the locks. The pins already in a lock are kept while pyproject.toml allows them; to
# move one: make lock LOCK_ARGS="--upgrade-package NAME". requirements-test.lock is constrained to requirements.lock,
# so the packages the two share have the same pins.
PIP_TOOLS_VERSION := 7.6.2
LOCKTOOL := .cache/pip-tools-$(PIP_TOOLS_VERSION)
lock:
	test -x $(LOCKTOOL)/bin/pip-compile || \
		{ python3 -m venv $(LOCKTOOL) && $(LOCKTOOL)/bin/pip install -q pip-tools==$(PIP_TOOLS_VERSION); }
	$(LOCKTOOL)/bin/pip-compile --allow-unsafe --no-emit-find-links --no-emit-index-url --output-file=requirements.lock \
		--strip-extras $(LOCK_ARGS) pyproject.toml
	$(LOCKTOOL)/bin/pip-compile --allow-unsafe --constraint=requirements.lock --extra=bench --extra=test \
		--no-emit-find-links --no-emit-index-url --output-file=requirements-test.lock --strip-extras $(LOCK_ARGS) \
		pyproject.toml
	# The +cpu label names this machine's build, not the version: a GPU machine installs the same version's CUDA build.
	sed -i 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/' $(LOCKS)

dagster-home:
	mkdir -p $(DAGSTER_HOME)
	cp $(FTPIPE_DAGSTER_YAML) $(DAGSTER_HOME)/dagster.yaml

demo: install dagster-home
	$(VENV)/bin/ftpipe demo

# Built once before the tests at full width; otherwise the first worker to need it builds it on one thread.
base-model: install
	$(VENV)/bin/ftpipe base-model

# ruff (style, import order) and mypy (types) read their settings from pyproject.toml ([tool.ruff], [tool.mypy]);
# make test runs both first, so CI fails on a finding of either.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Two workers, one torch thread each: half the suite waits on daemons, webservers and subprocess imports,
# which the other worker's training fills. Work stealing, because a few end-to-end tests take minutes.
PYTEST_WORKERS ?= 2
test: install lint base-model
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -ra -n $(PYTEST_WORKERS) --dist worksteal --durations=15

test-fast: install base-model
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -ra -n $(PYTEST_WORKERS) --dist worksteal -m "not slow"

# The tests whose outcome rests on what a tiny model scores, again as another machine would run them:
# ATEN_CPU_CAPABILITY changes the vectorised kernels (and so the summation order), the thread count how
# reductions are split, and each setting builds its own base model under them, as another CPU builds its own
# (2,400 pre-training steps of different rounding). A margin smaller than these moves is a test that fails
# somewhere else. (make test's own run is the machine's kernels at one thread.) The two settings run side by
# side, a core each; each log is printed whole when both end.
KERNEL_LOGS := $(FTPIPE_HOME)/test-kernels
test-kernels: install
	mkdir -p $(KERNEL_LOGS)
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
		FTPIPE_MODEL_CACHE=$(CURDIR)/.cache/models-default-1thread \
		$(PY) -m pytest -ra -m quality -p no:cacheprovider > $(KERNEL_LOGS)/default.log 2>&1 & default=$$!; \
	ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
		FTPIPE_MODEL_CACHE=$(CURDIR)/.cache/models-avx2-1thread \
		$(PY) -m pytest -ra -m quality -p no:cacheprovider > $(KERNEL_LOGS)/avx2.log 2>&1 & avx2=$$!; \
	wait $$default; default_rc=$$?; wait $$avx2; avx2_rc=$$?; \
	for k in default avx2; do echo "=== ATEN_CPU_CAPABILITY=$$k ==="; cat $(KERNEL_LOGS)/$$k.log; done; \
	test $$default_rc -eq 0 -a $$avx2_rc -eq 0

ui: install dagster-home
	$(VENV)/bin/dagster dev -w workspace.yaml

daemon: install dagster-home
	$(VENV)/bin/dagster-daemon run -w workspace.yaml

# The OpenAI-compatible fine-tuning API on the same state (docs at http://127.0.0.1:$(API_PORT)/docs).
API_PORT ?= 8321
api: install dagster-home
	$(VENV)/bin/ftpipe serve-api --port $(API_PORT)

clean:
	rm -rf $(FTPIPE_HOME)
