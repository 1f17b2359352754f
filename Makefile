# Two commands on a fresh Debian bookworm machine: `make demo` and `make test`.
# This file only orders the steps: packages come from scripts/setup.sh (which
# installs only what is missing), the build from CMake. Every target can be
# run again; extra CMake options go in CMAKE_ARGS, e.g.
#   make build CMAKE_ARGS=-DEMBER_NATIVE=OFF
BUILD_DIR  := build
JOBS       := $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
# Reliability builds (docs/RELIABILITY.md): sanitizers and fuzzing.
ASAN_DIR     := build-asan
FUZZ_DIR     := build-fuzz
FUZZ_SECONDS ?= 30
SANITIZER_ENV := ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 \
                 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 EMBER_CACHING_ALLOCATOR=0

.PHONY: all deps build demo vit-recipe vit-recipe-distill test test-sanitize fuzz format-check bench bench-gpt2 docs clean

all: build

deps:
	@bash scripts/setup.sh

build: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The two bundled demos with their defaults: attention regression (about half
# a minute), then the Vision Transformer on Fashion-MNIST (about three
# minutes of training); results under out/.
demo: build
	./$(BUILD_DIR)/bin/attention_regression
	./$(BUILD_DIR)/bin/vit
	@echo
	@echo "Results in out/attention_regression and out/vit (metrics.json, PNG charts, checkpoints)."
	@echo "Also: ./$(BUILD_DIR)/bin/seq2seq (Bahdanau-attention seq2seq on dates, about a minute), ./$(BUILD_DIR)/bin/bench, make bench."

# The ViT at CNN level (apps/vit/README.md, "The ViT at CNN level"). vit-recipe:
# the best configuration measured, a hybrid ViT trained alone for 50 epochs
# in bfloat16 (92.49% final in 669.5 s on 2 threads of a Zen 4, 2026-11-26);
# out/vit_recipe/metrics.json holds final_test_accuracy, best_test_accuracy
# and train_seconds (teacher_train_seconds 0: no teacher; a 5-minute teacher
# reaches 91%, below the student, and distilling from it did not help).
VIT_RECIPE := --hybrid 16 --depth 6 --epochs 50 --erase 0.25 --randaugment 1,5 --precision bf16
vit-recipe: build
	./$(BUILD_DIR)/bin/vit $(VIT_RECIPE) --out out/vit_recipe
	@echo "Results in out/vit_recipe (metrics.json, charts, checkpoints)."

# The DeiT teacher-student recipe (the ablation's last row): the ResNet
# teacher (build/bin/cnn), then the ViT student distilled from it (hard
# distillation token, RandAugment, DropPath, EMA). Its metrics.json counts
# the teacher's training in train_seconds (also recorded as
# teacher_train_seconds, with teacher_test_accuracy).
VIT_RECIPE_TEACHER :=
VIT_RECIPE_STUDENT := --hybrid 16 --depth 6 --epochs 30 --erase 0.25 --randaugment 1,5 --drop-path 0.1 --ema 0.999 \
                      --distill hard
vit-recipe-distill: build
	./$(BUILD_DIR)/bin/cnn $(VIT_RECIPE_TEACHER) --out out/vit_recipe_distill/teacher
	./$(BUILD_DIR)/bin/vit $(VIT_RECIPE_STUDENT) --teacher out/vit_recipe_distill/teacher/model.safetensors \
	    --out out/vit_recipe_distill
	@echo "Results in out/vit_recipe_distill (metrics.json; the teacher in out/vit_recipe_distill/teacher)."

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

# Every C++ and CUDA source in the style of .clang-format (Debian's
# clang-format 14, from setup.sh; `clang-format -i FILE` fixes a file), and
# none longer than docs/STYLE.md's 600 lines.
format-check: deps
	git ls-files -z '*.cpp' '*.h' '*.cu' '*.cuh' | xargs -0 clang-format --dry-run --Werror
	@git ls-files -z '*.cpp' '*.h' '*.cu' '*.cuh' | xargs -0 wc -l | \
	  awk '$$2 != "total" && $$1 > 600 { print $$2 ": " $$1 " lines, over docs/STYLE.md'"'"'s 600"; bad = 1 } END { exit bad }'

# The library, tests and apps built with AddressSanitizer (and LeakSanitizer)
# and UndefinedBehaviorSanitizer at -O0 -g1, then every test; the first report
# fails. The caching allocator is off so that freed memory really is freed.
# clang, where `make build` uses the default compiler (GCC on Debian): two
# compilers see every source, and an app starts in 0.18 s, not 0.30-0.35, since
# GCC's AddressSanitizer also registers each of UndefinedBehaviorSanitizer's
# records as a global (docs/RELIABILITY.md).
test-sanitize: deps
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_COMPILER=clang++ \
	      -DEMBER_SANITIZE=address,undefined $(CMAKE_ARGS)
	cmake --build $(ASAN_DIR) -j$(JOBS)
	$(SANITIZER_ENV) ctest --test-dir $(ASAN_DIR) --output-on-failure -j$(JOBS)

# Every libFuzzer target (tests/fuzz) for FUZZ_SECONDS each, fixed seed; the
# library is rebuilt with clang and coverage instrumentation in build-fuzz/.
fuzz: deps
	cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_COMPILER=clang++ -DEMBER_FUZZ=ON \
	      -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_APPS=OFF $(CMAKE_ARGS)
	cmake --build $(FUZZ_DIR) -j$(JOBS)
	bash tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

# Ember's benchmark table, then side-by-side ratios against PyTorch 1.13 when
# python3-torch is installed (it is never needed to build or test Ember), then
# bench-gpt2.
bench: build
	/usr/bin/python3 tools/bench_compare.py --build $(BUILD_DIR)
	/usr/bin/python3 tools/gpt2_compare.py --build $(BUILD_DIR)

# GPT-2 124M training at llm.c's setting side by side in llm.c (built from
# ../shared/anchors/llm.c into $(BUILD_DIR)/gpt2_compare), PyTorch 1.13 and
# Ember, from the same weights on the same tokens, 20 steps each: losses,
# step times, peak memory (docs/PERFORMANCE.md). Skipped with a message
# without llm.c's anchor; without PyTorch its column is left out.
bench-gpt2: build
	/usr/bin/python3 tools/gpt2_compare.py --build $(BUILD_DIR)

# The API reference: HTML from the headers' doc comments and the guides, in
# $(BUILD_DIR)/docs/html, with Doxygen (Debian package doxygen). Optional:
# `make deps` does not install it; without it this says how to get it.
EMBER_VERSION := $(shell sed -n '/^project.Ember VERSION/s/.*VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
docs:
	@command -v doxygen >/dev/null 2>&1 || { \
	  echo "make docs: doxygen is not installed. Install it (Debian/Ubuntu: sudo apt-get install doxygen) and run make docs again." >&2; \
	  exit 1; }
	@mkdir -p $(BUILD_DIR)/docs
	EMBER_VERSION=$(EMBER_VERSION) EMBER_DOCS_OUT=$(BUILD_DIR)/docs doxygen docs/Doxyfile
	@echo "API reference: $(BUILD_DIR)/docs/html/index.html (warnings, if any: $(BUILD_DIR)/docs/warnings.log)"

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)
