# The two commands a newcomer needs: `make demo` and `make test`. Each installs what is
# missing (Debian packages, npm packages), builds, and runs.
PYTHON ?= /usr/bin/python3
BUILD ?= build
JOBS ?= $(shell nproc)
export TRAINSCOPE_BUILD_DIR := $(abspath $(BUILD))

.PHONY: all setup build test test-cpp test-python test-e2e test-fuzz fuzz-long test-torch2 demo bench bench-doctor clean

all: build

setup:
	@bash scripts/setup.sh
	@if [ -f web/package.json ]; then bash scripts/setup-web.sh; fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINSCOPE_PYTHON_EXECUTABLE=$(PYTHON)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	$(MAKE) --no-print-directory test-cpp test-python test-e2e test-fuzz

test-cpp:
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-python:
	PYTHONPATH=$(BUILD)/python $(PYTHON) -m pytest -q tests/python

test-e2e:
	@if [ -x tests/e2e/run.sh ]; then tests/e2e/run.sh; else echo "test-e2e: no browser tests yet"; fi

test-fuzz:
	@if [ -x fuzz/run.sh ]; then fuzz/run.sh; else echo "test-fuzz: no fuzz targets yet"; fi

# A long hunt: every target for FUZZ_SECONDS (120) with its corpus kept between runs outside
# the repository; each crash found is copied into fuzz/corpus/<target>/ as a regression input.
FUZZ_SECONDS ?= 120
FUZZ_CORPUS ?= $(HOME)/.cache/trainscope/fuzz-corpus
fuzz-long:
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_CORPUS=$(FUZZ_CORPUS) FUZZ_KEEP_CRASHES=1 fuzz/run.sh

# The second leg: the package as a user installs it (pip install .) into a cached venv with
# PyPI's torch 2.x and NumPy 2 (scripts/torch2-requirements.txt), and the whole Python suite
# against it. Needs the build for the C++ test helpers the suite starts.
test-torch2: build
	@venv=$$(bash scripts/torch2-venv.sh) && \
	$$venv/bin/python -m pip install -q --no-build-isolation --no-deps --force-reinstall \
	  --config-settings=build-dir=$(abspath $(BUILD))-torch2 . && \
	TRAINSCOPE_TEST_INSTALLED=1 $$venv/bin/python -m pytest -q tests/python

demo: build
	$(BUILD)/trainscope demo --logdir runs

bench: build
	$(BUILD)/bench/store_bench --benchmark_min_time=0.5
	PYTHONPATH=$(BUILD)/python $(PYTHON) bench/log_bench.py

bench-doctor: build
	$(PYTHON) bench/doctor/run_scenarios.py --build $(BUILD) --write

clean:
	rm -rf $(BUILD)
