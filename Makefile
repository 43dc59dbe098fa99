# trainctl: every target does its own setup, so `make run` and `make test` work on a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BIN ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
CHECKOV_VENV ?= .venv-checkov
MLFLOW_VENV ?= .venv-mlflow
MOTO_VENV ?= .venv-moto
CONSTRAINTS := requirements/constraints.txt
# uv installs the pinned versions: the same packages pip installs from the same constraints, in
# a fraction of the time, as it downloads side by side. pip is used once, to install uv itself.
# uv compiles bytecode only when asked (pip always does): without it, where PYTHONDONTWRITEBYTECODE
# is set (as on CI machines and in many images), every process that Ray starts compiles torch's
# and Ray's sources again on import, and the test suite ran at half speed.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
UV_INSTALL := $(UV) pip install --quiet --compile-bytecode --python
# Some machines point pip at local CPU-only torch wheels; torchvision on PyPI only matches the
# standard torch wheel, so installs here use plain PyPI and the pinned pair (both run on CPU).
# uv reads no pip configuration: a package mirror named by PIP_INDEX_URL is passed on to it.
PIP := env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null $(PY) -m pip
ifdef PIP_INDEX_URL
export UV_DEFAULT_INDEX ?= $(PIP_INDEX_URL)
endif
# KubeRay's CRDs for the schema tests: found (or downloaded and checked against the committed
# SHA-256 sums) by tests/kuberay_crds.py, which needs only the machine's Python.
CRDS := $(PYTHON_BIN) tests/kuberay_crds.py
# Two xdist workers, each with its own shared Ray cluster for one group of cluster tests
# (tests/conftest.py), the other tests filling in behind. The bench/ smoke tests run in
# `make bench-smoke` (CI runs both). Override with e.g. PYTEST_ARGS='-n 0 tests/unit'.
PYTEST_ARGS ?= -n 2 --dist loadgroup --durations=30 -m "not bench_smoke"

.PHONY: help setup run test bench-smoke parity fresh-clone-test lint fmt docs manifests image crds bench lock kind-up kind-test kind-down

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-17s %s\n", $$1, $$2}'

$(UV):
	test -x $(PY) || $(PYTHON_BIN) -m venv $(VENV)
	$(PIP) install --quiet uv==$(UV_VERSION)

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | $(UV)
	@echo "installing pinned dependencies into $(VENV) (about a minute on a fast network)..."
	$(UV_INSTALL) $(PY) -c $(CONSTRAINTS) -e '.[dev]'
	@echo "installed: $(VENV)/bin/trainctl (\`source $(VENV)/bin/activate\` puts trainctl on your PATH)"
	touch $@

$(CHECKOV_VENV)/.installed: requirements/checkov.txt | $(UV)
	@echo "installing checkov for the tests into $(CHECKOV_VENV)..."
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON_BIN) -m venv $(CHECKOV_VENV)
	$(UV_INSTALL) $(CHECKOV_VENV)/bin/python -r requirements/checkov.txt
	touch $@

$(MLFLOW_VENV)/.installed: requirements/mlflow-server.txt | $(UV)
	@echo "installing the MLflow server for the tests into $(MLFLOW_VENV)..."
	test -x $(MLFLOW_VENV)/bin/python || $(PYTHON_BIN) -m venv $(MLFLOW_VENV)
	$(UV_INSTALL) $(MLFLOW_VENV)/bin/python -r requirements/mlflow-server.txt
	touch $@

$(MOTO_VENV)/.installed: requirements/moto-server.txt | $(UV)
	@echo "installing the moto S3 server for the tests into $(MOTO_VENV)..."
	test -x $(MOTO_VENV)/bin/python || $(PYTHON_BIN) -m venv $(MOTO_VENV)
	$(UV_INSTALL) $(MOTO_VENV)/bin/python -r requirements/moto-server.txt
	touch $@

SETUP_STAMPS := $(VENV)/.installed $(CHECKOV_VENV)/.installed $(MLFLOW_VENV)/.installed $(MOTO_VENV)/.installed
# Side by side: most of a first setup is waiting on downloads (all four with uv in 60 s on a fresh
# two-core machine, 2026-12-06; with pip, 6.5 minutes one after another and 3.5 side by side).
setup:  ## create the virtualenvs with pinned versions
	@$(MAKE) --no-print-directory --silent --jobs=4 $(SETUP_STAMPS)

run: $(VENV)/.installed  ## train the default job (digits, 2 CPU workers, local Ray)
	$(VENV)/bin/trainctl train

# Where PYTHONDONTWRITEBYTECODE is set (CI machines, many images), every process the suite
# starts (trainctl, Ray's workers) compiled the app's sources from this checkout again, and each
# pytest worker rewrote every test module: collection took 7.4 CPU-seconds instead of 4.1. The
# whole suite's time moved within its noise (9:00 against 8:57 and 9:04, 2026-12-06).
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE

test:  ## find the KubeRay CRDs, lint, then the test suite (all but the bench smokes)
	@crds="$$($(CRDS))" && $(MAKE) --no-print-directory setup && \
	  $(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && \
	  $(TEST_ENV) KUBERAY_CRDS_DIR="$$crds" CHECKOV_BIN=$(abspath $(CHECKOV_VENV))/bin/checkov \
	  MLFLOW_BIN=$(abspath $(MLFLOW_VENV))/bin/mlflow MOTO_BIN=$(abspath $(MOTO_VENV))/bin/moto_server \
	  $(VENV)/bin/pytest $(PYTEST_ARGS)

bench-smoke: $(VENV)/.installed $(MOTO_VENV)/.installed  ## every bench/ script at a tiny size: they still run and report (CI runs this too)
	$(TEST_ENV) MOTO_BIN=$(abspath $(MOTO_VENV))/bin/moto_server $(VENV)/bin/pytest -n 2 -p no:cacheprovider --durations=0 -m bench_smoke tests/cluster/test_bench_smoke.py

PARITY_EXAMPLES ?= 5000
parity: $(VENV)/.installed  ## Helm and `trainctl render` on many generated values files (make test runs 200)
	@crds="$$($(CRDS))" && KUBERAY_CRDS_DIR="$$crds" TRAINCTL_PARITY_EXAMPLES=$(PARITY_EXAMPLES) \
	  $(VENV)/bin/pytest -n 0 -p no:cacheprovider tests/contract/test_render_parity.py \
	  -k generated --hypothesis-show-statistics

fresh-clone-test:  ## clone this commit into an empty temp folder and run `make test` there
	scripts/fresh-clone-test.sh

lint: $(VENV)/.installed  ## ruff lint and format check
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

fmt: $(VENV)/.installed  ## format and autofix
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

docs: $(VENV)/.installed  ## regenerate docs/settings.md from the settings model
	$(VENV)/bin/trainctl env --format markdown > docs/settings.md

CHART := charts/trainctl
IMAGE ?= trainctl:$(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' $(CHART)/Chart.yaml)

manifests: $(VENV)/.installed  ## regenerate the chart schema from the settings, sync the packaged chart, re-render manifests/ and examples/data-pool-manifests/
	$(VENV)/bin/python -m app.k8s.train_schema --write
	cp $(CHART)/Chart.yaml $(CHART)/values.yaml $(CHART)/values.schema.json app/k8s/templates/chart/
	rm -rf manifests examples/data-pool-manifests
	$(VENV)/bin/trainctl render --values examples/values-three-pools.yaml --out manifests --release train --namespace ml
	$(VENV)/bin/trainctl render --values examples/values-data-pool.yaml --out examples/data-pool-manifests --release train --namespace ml

image:  ## build the app image (needs docker)
	@command -v docker >/dev/null || { echo "make image needs docker on PATH" >&2; exit 1; }
	DOCKER_BUILDKIT=1 docker build -f docker/Dockerfile -t $(IMAGE) .

crds:  ## find the pinned KubeRay CRDs, or download them into .cache/ and check their SHA-256
	@$(CRDS)

kind-up: $(VENV)/.installed  ## kind cluster + KubeRay operator + app image + shared volume (needs docker, kind, kubectl)
	$(PY) -m tests.kind.kindenv up

kind-test: $(VENV)/.installed  ## run the kind integration suite (brings the cluster up if absent)
	$(VENV)/bin/pytest tests/kind -m kind -v -rs

kind-down: $(VENV)/.installed  ## delete the kind cluster and its shared folder
	$(PY) -m tests.kind.kindenv down

bench: $(VENV)/.installed $(MOTO_VENV)/.installed  ## side-by-side benchmarks (ingest, overhead, startup, checkpoint, S3; GPU if present), < 10 min
	MOTO_BIN=$(abspath $(MOTO_VENV))/bin/moto_server $(PY) -m bench

lock:  ## re-resolve and rewrite requirements/constraints.txt (needs the package index)
	rm -rf .venv-lock && $(PYTHON_BIN) -m venv .venv-lock
	env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null .venv-lock/bin/pip install --quiet -e '.[dev]'
	.venv-lock/bin/pip freeze --exclude-editable | sort -f > $(CONSTRAINTS)
	rm -rf .venv-lock
