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

.PHONY: all setup configure build install-python test test-cpp test-python demo testdata clean sanitize sanitize-build fuzz soak

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

# The Python tests on one pytest-xdist worker a core (tests/python/conftest.py gives
# each worker's torch one thread); work-stealing keeps the last long tests from
# queueing behind one worker. PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2
test-python: build
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal tests/python

test: build
	@$(MAKE) --no-print-directory test-cpp
	@$(MAKE) --no-print-directory test-python

demo: build
	@bash tools/demo.sh

# Regenerates testdata/ from the programs in python/fxremat/testing/programs.py.
testdata: build
	$(PY) tools/make_testdata.py

# One clang build with AddressSanitizer + UndefinedBehaviorSanitizer in $(BUILD)-asan,
# for .ci/run (tools/setup.sh installs clang and libclang-rt-14-dev):
#   make sanitize  the C++ unit and golden tests (fxremat_core_tests) and the
#                  bad-input tests of the CLI; any sanitizer report fails them
#   make fuzz      the libFuzzer target for the readers (JSON graphs, IR text,
#                  policy files, signatures) for FUZZ_SECONDS, on a seed corpus of
#                  testdata/, tests/bad_inputs/ and structural mutations
#                  (tests/fuzz/make_corpus.py); a crash leaves its input in
#                  $(BUILD)-asan/fuzz-crashes/ (keep it in tests/bad_inputs/)
# Everything is instrumented for libFuzzer too (-fsanitize=fuzzer-no-link), so one
# build serves both. Kept cheap: -O1 with line tables only, no libtorch (the CLI loads it
# as a plugin; the bad inputs needing it run in the normal build), no Python
# extension, no benchmarks, only the three targets.
ASAN_BUILD   := $(BUILD)-asan
SAN_ENV      := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
FUZZ_SECONDS ?= 60

$(ASAN_BUILD)/build.ninja: CMakeLists.txt tests/CMakeLists.txt | setup
	$(CMAKE) -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None \
	  -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only -fsanitize=fuzzer-no-link" -DFXREMAT_SANITIZE=address,undefined \
	  -DFXREMAT_PYTHON=$(abspath $(PY)) -DFXREMAT_WITH_TORCH=OFF -DFXREMAT_BUILD_PYTHON=OFF \
	  -DFXREMAT_BUILD_BENCH=OFF -DFXREMAT_BUILD_FUZZ=ON

sanitize-build: setup $(ASAN_BUILD)/build.ninja
	$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS) --target fxremat_core_tests fxremat fxremat_fuzz_loader

sanitize: sanitize-build
	cd $(ASAN_BUILD) && $(SAN_ENV) ../$(CMAKE) -E env ctest --output-on-failure -j $(JOBS) \
	  -R '^(core_tests|core_tests_budget|core_tests_offload|core_tests_offload_overlapped|cli_bad_inputs|cli_bad_inputs_large)$$'

fuzz: sanitize-build
	rm -rf $(ASAN_BUILD)/fuzz-seeds $(ASAN_BUILD)/fuzz-corpus && mkdir -p $(ASAN_BUILD)/fuzz-corpus $(ASAN_BUILD)/fuzz-crashes
	$(PY) tests/fuzz/make_corpus.py $(ASAN_BUILD)/fuzz-seeds
	$(SAN_ENV) $(ASAN_BUILD)/tests/fxremat_fuzz_loader -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=20 \
	  -rss_limit_mb=2048 -seed=1 -print_final_stats=1 -dict=tests/fuzz/fxremat.dict \
	  -artifact_prefix=$(ASAN_BUILD)/fuzz-crashes/ $(ASAN_BUILD)/fuzz-corpus $(ASAN_BUILD)/fuzz-seeds

# The soak of random programs (tests/python/test_soak.py): SOAK_PROGRAMS programs
# (make test runs 200 of at most 6 ops), each partitioned every way and verified
# numerically. About a second per program at SOAK_MAX_OPS=6.
SOAK_PROGRAMS ?= 2000
SOAK_MAX_OPS  ?= 12
soak: build
	SOAK_PROGRAMS=$(SOAK_PROGRAMS) SOAK_MAX_OPS=$(SOAK_MAX_OPS) $(PY) -m pytest -q -p no:logging -rxf tests/python/test_soak.py

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

# The whole op_db parity corpus (every OpInfo, static and dynamic shapes; about
# 6 minutes on 2 cores): docs/op_db_parity.md. `make test` runs a bounded sample
# (tests/python/test_op_db_parity.py).
.PHONY: op-db-parity
op-db-parity: build
	$(PY) bench/op_db_parity.py --modes static,dynamic --out docs/op_db_parity.md -q
