# Thin wrapper over CMake. `make` builds into build/; `make test` installs
# what is missing, builds and runs the whole suite.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# Tests run at a time by `make test` (some are marked to run alone; see
# CMakeLists.txt).
CTEST_JOBS ?= 2

.PHONY: all deps build test test-asan fuzz bench bench-cluster profile run clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

test: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS)

# The whole suite again under AddressSanitizer and UBSan.
test-asan: deps
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DTALLY_SANITIZE=ON $(CMAKE_FLAGS)"

# The libFuzzer harnesses of tests/fuzz, built with clang (ASan + UBSan)
# into build-fuzz, each run for FUZZ_SECONDS; fails on any finding, whose
# input is kept in build-fuzz/artifacts/. See scripts/fuzz.sh.
FUZZ_SECONDS ?= 20
fuzz:
	@scripts/deps.sh --fuzz
	scripts/fuzz.sh $(FUZZ_SECONDS)

# Release build, then tallyd on ./data with the default ports; Ctrl-C stops
# it cleanly. Flags: make run ARGS="--durability async".
run: deps
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build build-release -j $(JOBS) --target tallyd tally_cli
	build-release/tallyd --data ./data $(ARGS)

# Release build; the in-process benchmark (scripts/bench.sh), then tallyd
# against Redis (3 persistence settings) and PostgreSQL 15
# (scripts/bench_compare.sh), then hot-key INCR through tallyd on a
# 3-master Redis Cluster, 1 shard against 3 (scripts/bench_cluster.sh).
# Writes docs/BENCHMARKS.md and docs/*.png.
# The tree is named as it was when built (BENCH_REV): an edit made while
# the benchmark runs is not in the binary it measures.
bench:
	@scripts/deps.sh --bench
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	export BENCH_REV="$$(ROOT='$(CURDIR)' bash -c '. scripts/bench_lib.sh && tree_rev')" && \
	cmake --build build-release -j $(JOBS) && \
	scripts/bench.sh build-release && \
	scripts/bench_compare.sh build-release && \
	scripts/bench_cluster.sh build-release

# The cluster benchmark alone (its section of docs/BENCHMARKS.md).
bench-cluster:
	@scripts/deps.sh
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build build-release -j $(JOBS) --target tallyd
	scripts/bench_cluster.sh build-release

# Where tallyd's time goes under one workload (scripts/profile.sh):
# make profile WORKLOAD=like TOOL=callgrind. WORKLOAD: incr, incr-hot,
# incr-p1, like, mcount; TOOL: perf (sampled, kernel included) or
# callgrind (instructions counted); ARGS: more tallyd flags
# (ARGS="--threads 1"). Writes build-prof/profile-*/.
WORKLOAD ?= incr
TOOL ?= perf
profile:
	@scripts/deps.sh --profile
	scripts/profile.sh --tool $(TOOL) $(WORKLOAD) build-prof -- $(ARGS)

clean:
	rm -rf build build-asan build-release build-fuzz build-prof
