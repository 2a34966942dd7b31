# Thin wrapper: everything real is in CMake.  `make demo`, `make check`, `make bench`,
# `make python`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build demo check check-asan check-python python bench install clean format format-check

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

configure: $(BUILD)/CMakeCache.txt

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD)

# The whole suite, then again under ASan+UBSan (clang, which also builds the
# libFuzzer targets and runs them briefly).
check: build format-check
	cd $(BUILD) && ctest --output-on-failure --timeout 600 -j $(JOBS)
	$(MAKE) check-python
	$(MAKE) check-asan

# The Python package: $(BUILD)/venv with kcage installed for development and the pinned
# test dependencies (apache-tvm, cloudpickle, pytest); its tests (the differential suite
# against TVM's own popen_pool; `PYTEST_ARGS= make check-python` adds the slow tuning).
python: build
	./scripts/python-venv.sh $(BUILD)

check-python: build
	./scripts/python-check.sh $(BUILD)

check-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DKC_SANITIZE=ON -DKC_FUZZ=ON $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure --timeout 600 -j $(JOBS) -LE no-asan

bench: build
	./bench/run.sh $(BUILD)

install: build
	cmake --install $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

# The tree matches .clang-format (make check runs this first).
format-check: deps
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
