# The two commands of the README, plus the benchmarks. Every target runs the (idempotent) set-up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
REPORT_DIR ?= report
# Worlds side by side; empty: crashproof's default, one per core and one more.
JOBS ?=
# The implementation to certify: empty for the reference, `go` for examples/go, or any command line.
IMPL ?=
IMPL_COMMAND = $(if $(filter go,$(IMPL)),examples/go/run.sh,$(IMPL))

.PHONY: setup test test-under-load certify mutants variants bench clean

setup:
	@bash scripts/setup.sh

# Test processes side by side (pytest-xdist): twice the cores, since most tests wait on worlds, implementations
# and timeouts as much as they compute; each test goes to whichever process is free (worksteal), so one long module
# does not hold the run. TEST_JOBS=0 runs them in this process, one after another.
TEST_JOBS ?= $(shell echo $$(( $$(nproc) * 2 )))

# Tests marked `alone` (deadlines measured on an idle machine) run after the parallel share, one at a time.
# A run a test starts without --jobs starts one world (CRASHPROOF_JOBS): the test processes already keep every core
# busy, and each more world of a run is a worker's start and a world's start of CPU (docs/performance.md, "The test
# suite"). Tests that need several worlds name --jobs.
test: setup
	$(if $(filter 0,$(TEST_JOBS)),CRASHPROOF_JOBS=1 $(VENV)/bin/pytest $(PYTEST_ARGS),\
	CRASHPROOF_JOBS=1 $(VENV)/bin/pytest -n $(TEST_JOBS) --dist worksteal -m "not alone" $(PYTEST_ARGS) && \
	CRASHPROOF_JOBS=1 $(VENV)/bin/pytest -m alone $(PYTEST_ARGS))

# The signal and teardown tests with every core kept busy (docs/ci.md, "Under load").
test-under-load: setup
	bash scripts/under-load.sh

certify: setup
	$(VENV)/bin/crashproof certify $(if $(IMPL_COMMAND),--impl '$(IMPL_COMMAND)') $(if $(JOBS),--jobs $(JOBS)) \
		--report-dir $(REPORT_DIR)

mutants: setup
	$(VENV)/bin/crashproof mutants $(if $(filter go,$(IMPL)),--impl examples/go/run.sh --mutants examples/go/mutants) \
		$(if $(JOBS),--jobs $(JOBS)) --report-dir $(REPORT_DIR)

# Every legal variant of the reference on the whole matrix and under explore's ci profile: each must certify, and a
# failure is a harness defect (docs/variants.md).
variants: setup
	$(VENV)/bin/crashproof variants --explore $(if $(JOBS),--jobs $(JOBS)) --report-dir $(REPORT_DIR)/variants

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(REPORT_DIR) .pytest_cache .hypothesis examples/go/bin
