# fxremat: two commands for people (see README.md):
#   make demo   set up what is missing, build, run the main job on bundled data
#   make test   set up what is missing, build, run all C++ and Python tests
# Everything a fresh machine lacks is installed by tools/setup.sh (idempotent).

VENV      := .venv
PY        := $(VENV)/bin/python
CMAKE     := $(VENV)/bin/cmake
BUILD     := build
JOBS      ?= 2
FXREMAT   := $(BUILD)/fxremat
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: all setup configure build install-python test test-cpp test-python demo testdata clean sanitize

all: build

setup:
	@bash tools/setup.sh

$(BUILD)/build.ninja: CMakeLists.txt tests/CMakeLists.txt | setup
	$(CMAKE) -S . -B $(BUILD) -G Ninja -DFXREMAT_PYTHON=$(abspath $(PY)) -DCMAKE_BUILD_TYPE=RelWithDebInfo

configure: setup $(BUILD)/build.ninja

build: configure
	$(CMAKE) --build $(BUILD) -j $(JOBS)
	@$(MAKE) --no-print-directory install-python

# Editable install of the Python package, without build isolation (a build
# environment would make pip resolve torch by itself). Skipped when present.
install-python:
	@$(PY) -c "import fxremat, sys; sys.exit(0 if fxremat.__file__.startswith('$(abspath python)') else 1)" 2>/dev/null || \
	  $(PY) -m pip install -q --no-build-isolation --no-deps -e python

test-cpp: build
	cd $(BUILD) && ../$(CMAKE) -E env ctest --output-on-failure -j $(JOBS)

test-python: build
	$(PY) -m pytest -q tests/python

test: build
	@$(MAKE) --no-print-directory test-cpp
	@$(MAKE) --no-print-directory test-python

demo: build
	@bash tools/demo.sh

# Regenerates testdata/ from the programs in python/fxremat/testing/programs.py.
testdata: build
	$(PY) tools/make_testdata.py

# Address and undefined-behaviour sanitizer build of the C++ tests.
sanitize: setup
	$(CMAKE) -S . -B $(BUILD)-asan -G Ninja -DFXREMAT_PYTHON=$(abspath $(PY)) -DFXREMAT_SANITIZE=address,undefined -DFXREMAT_BUILD_PYTHON=OFF
	$(CMAKE) --build $(BUILD)-asan -j $(JOBS) --target fxremat_core_tests
	$(BUILD)-asan/tests/fxremat_core_tests

clean:
	rm -rf $(BUILD) $(BUILD)-asan

# ---- benchmarks (not part of `make test`; docs/benchmarks.md) -------------------
# Checks the synthetic graph generator against AOTAutograd, makes the graphs
# (cached under bench/out/, git-ignored), times fxremat against PyTorch's
# min_cut_rematerialization_partition, and rewrites docs/benchmarks.md and
# docs/benchmarks.png. Takes about an hour; BENCH_ARGS passes options to
# bench/run.py (e.g. BENCH_ARGS="--only gpt2_2l synth_10k --repeat 5").
BENCH_ARGS ?=
.PHONY: bench
bench: build
	$(CMAKE) --build $(BUILD) -j $(JOBS) --target fxremat_bench fxremat_synth
	$(PY) bench/check_synth.py --build $(BUILD)
	$(PY) bench/make_graphs.py --build $(BUILD)
	$(PY) bench/run.py --build $(BUILD) $(BENCH_ARGS)
