# Two commands on a fresh Debian bookworm machine: `make demo` and `make test`.
# This file only orders the steps: packages come from scripts/setup.sh (which
# installs only what is missing), the build from CMake. Every target can be
# run again; extra CMake options go in CMAKE_ARGS, e.g.
#   make build CMAKE_ARGS=-DEMBER_NATIVE=OFF
BUILD_DIR  := build
JOBS       := $(shell nproc 2>/dev/null || echo 2)
DEMO_APP   := attention_regression
CMAKE_ARGS ?=

.PHONY: all deps build demo test bench clean

all: build

deps:
	@bash scripts/setup.sh

build: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	./$(BUILD_DIR)/bin/$(DEMO_APP)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

# Ember's benchmark table, then side-by-side ratios against PyTorch 1.13 when
# python3-torch is installed (it is never needed to build or test Ember).
bench: build
	/usr/bin/python3 tools/bench_compare.py --build $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
