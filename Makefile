# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv/ on first use and reuse it afterwards (the stamp file
# is rebuilt only when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Installed before the [torch] extra so that pip finds it satisfied: here
# torch==2.13.0 is a local CPU build, any other spec pulls GBs of CUDA wheels.
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: demo test cluster-test benchmark dist image clean

$(STAMP): pyproject.toml $(wildcard scala/src/main/scala/io/gradspark/kernels/*.scala)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q '$(TORCH)'
	$(PY) -m pip install -q -e '.[dev,torch]'
	$(PY) -m gradspark.jvm.build
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/train_logistic.py

# Two pytest-xdist workers: a fit's critical path is serial (Python -> JVM -> tasks ->
# back), so one worker leaves a core idle; groups keep shared servers on one worker
# (tests/conftest.py).
test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

# A standalone master + 2 workers on loopback, a spark-submit job, then stop.
cluster-test: $(STAMP)
	$(PY) -m pytest -q tests/test_standalone_cluster.py

# An sdist and a wheel that carries the JVM kernels jar (setup.py builds it, with the
# Scala compiler pyspark ships, in pip's isolated build environment).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m zipfile -l dist/*.whl | grep -q 'gradspark/jars/gradspark-kernels.jar'

# The docker/ image, from the wheel (docker or podman; BASE_IMAGE=... for another base).
ENGINE ?= $(shell command -v docker >/dev/null && echo docker || echo podman)
image: dist
	cp dist/gradspark-*.whl docker/wheels/
	$(ENGINE) build -f docker/Dockerfile -t gradspark $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) .

benchmark: $(STAMP)
	$(PY) benchmarks/engine.py --scaling

clean:
	rm -rf $(VENV) build dist *.egg-info python/*.egg-info
