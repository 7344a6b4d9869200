# tfx-parallel: the two commands a user types are `make run` and `make test`.
# Both do `make setup` first when needed (it is idempotent and fast when nothing changed).

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST := $(PY) -m pytest

.PHONY: setup run test test-unit test-e2e docs bench bench-smoke clean gpu-check

setup: $(STAMP)

# The interpreter for a new .venv: Python 3.10 or 3.9 from the machine, else uv's managed
# CPython 3.10, said in one line (.ci/find_python). `make run PYTHON=/path/to/python3.10`
# names one (only on the command line: PYTHON in the environment is often another tool's).
SETUP_PYTHON := $(if $(filter command line,$(origin PYTHON)),$(PYTHON))

# Re-install only when the pins or the package definition change. --compile-bytecode: this
# environment sets PYTHONDONTWRITEBYTECODE=1, so without it every process compiles TensorFlow anew.
$(STAMP): constraints.txt setup.py
	@if [ ! -x $(PY) ]; then PYBIN=$$(./.ci/find_python "$(SETUP_PYTHON)") || exit 1; \
	  echo "Creating $(VENV) with $$PYBIN"; $$PYBIN -m venv $(VENV) || exit 1; fi
	$(PY) -m pip install -q --disable-pip-version-check uv==0.13.9
	$(VENV)/bin/uv pip install --compile-bytecode --python $(PY) -c constraints.txt -e '.[test,dask,docs]'
	$(PY) -c "import tfx_parallel.components.common.tfenv as e; e.prepare(); import tfx_bsl, ml_metadata, apache_beam, tf_keras, dask.distributed, mkdocs, material; print('environment OK')"
	@touch $(STAMP)

run: setup
	$(VENV)/bin/tfx-parallel run $(ARGS)

# Fast unit tests first, then the slow end-to-end tests. Two pytest workers: most of a
# test's time is TensorFlow start-up and waiting on child processes, not both cores.
# --dist loadfile: all of a file's tests on one worker, so a module-scoped fixture (a
# pipeline run shared by a file's tests) runs once; xdist's default (load) hands a file's
# tests to both workers and each ran the fixture (tests/test_makefile_xdist.py).
XDIST := -n 2 --dist loadfile
# The docs site first (seconds): --strict fails on a broken link or a missing page. Not
# --quiet: mkdocs 1.6 then drops the warnings that --strict counts, and passes.
test: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	$(PYTEST) $(XDIST) -m "not slow" --durations=10 tests
	$(PYTEST) $(XDIST) -m "slow" --durations=30 tests

test-unit: setup
	$(PYTEST) $(XDIST) -m "not slow" --durations=10 tests

test-e2e: setup
	$(PYTEST) $(XDIST) -m "slow" --durations=30 tests

# The docs site (mkdocs.yml, docs/) into site/. --strict: a broken link, a missing page or
# a page left out of the nav fails the build (`make test` runs the same build first).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: setup
	$(PY) benchmarks/run_all.py

bench-smoke: setup
	$(PY) benchmarks/run_all.py --smoke

# The GPU check in a trainer-only venv (no TFX: TensorFlow, tf_keras, numpy, absl,
# matplotlib; Python 3.10-3.12), for a GPU machine: benchmarks/gpu_check.py, then the GPU
# tests; the report goes to gpu_check.md. Where nvidia-smi lists a GPU it installs
# tensorflow[and-cuda] and fails when TensorFlow cannot use it; elsewhere it runs the
# CPU path (--small) and the report says no GPU was used.
GPU_VENV := .venv-gpu
GPU_PY := $(GPU_VENV)/bin/python
HAS_GPU = $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
GPU_CHECK_ARGS ?= $(if $(filter 0,$(HAS_GPU)),--small,)
GPU_PYTHON ?=
gpu-check:
	@PYBIN=$(GPU_PYTHON); for c in python3.10 python3.11 python3.12 $$HOME/.pyenv/versions/3.1[012]*/bin/python3; do \
	  [ -n "$$PYBIN" ] && break; \
	  "$$c" -c 'import sys; assert (3, 10) <= sys.version_info[:2] <= (3, 12)' 2>/dev/null && PYBIN=$$c; done; \
	[ -n "$$PYBIN" ] || { echo "make gpu-check needs Python 3.10-3.12 (or GPU_PYTHON=...)" >&2; exit 1; }; \
	if [ ! -x $(GPU_PY) ]; then echo "Creating $(GPU_VENV) with $$PYBIN"; $$PYBIN -m venv $(GPU_VENV); fi
	$(GPU_PY) -m pip install -q --disable-pip-version-check uv==0.13.9
	$(GPU_VENV)/bin/uv pip install -q --compile-bytecode --python $(GPU_PY) --no-deps -e .
	$(GPU_VENV)/bin/uv pip install -q --compile-bytecode --python $(GPU_PY) -r requirements-gpu-trainer.txt \
	  $(if $(filter 0,$(HAS_GPU)),,'tensorflow[and-cuda]==2.16.2')
	$(GPU_PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS) --output gpu_check.md
	$(GPU_PY) -m pytest -p no:cacheprovider -q tests/test_gpu.py

clean:
	rm -rf runs build site *.egg-info .pytest_cache
