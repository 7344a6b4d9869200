# tfx-parallel: the two commands a user types are `make run` and `make test`.
# Both do `make setup` first when needed (it is idempotent and fast when nothing changed).

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST := $(PY) -m pytest

.PHONY: setup run test test-unit test-e2e bench bench-smoke clean

setup: $(STAMP)

# Re-install only when the pins or the package definition change. --compile-bytecode: this
# environment sets PYTHONDONTWRITEBYTECODE=1, so without it every process compiles TensorFlow anew.
$(STAMP): constraints.txt setup.py
	@PYBIN=$$(./.ci/find_python) || exit 1; \
	if [ ! -x $(PY) ]; then echo "Creating $(VENV) with $$PYBIN"; $$PYBIN -m venv $(VENV); fi
	$(PY) -m pip install -q --disable-pip-version-check uv==0.13.9
	$(VENV)/bin/uv pip install --compile-bytecode --python $(PY) -c constraints.txt -e '.[test,dask]'
	$(PY) -c "import tfx_parallel.pipeline.tfenv, tfx_bsl, ml_metadata, apache_beam, tf_keras, dask.distributed; print('environment OK')"
	@touch $(STAMP)

run: setup
	$(VENV)/bin/tfx-parallel run $(ARGS)

# Fast unit tests first, then the slow end-to-end tests. Two pytest workers: most of a
# test's time is TensorFlow start-up and waiting on child processes, not both cores.
XDIST := -n 2
test: setup
	$(PYTEST) $(XDIST) -m "not slow" --durations=10 tests
	$(PYTEST) $(XDIST) -m "slow" --durations=30 tests

test-unit: setup
	$(PYTEST) $(XDIST) -m "not slow" --durations=10 tests

test-e2e: setup
	$(PYTEST) $(XDIST) -m "slow" --durations=30 tests

bench: setup
	$(PY) benchmarks/run_all.py

bench-smoke: setup
	$(PY) benchmarks/run_all.py --smoke

clean:
	rm -rf runs build *.egg-info .pytest_cache
