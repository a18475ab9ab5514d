# The two commands of the README, plus the benchmarks. Every target runs the (idempotent) set-up first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
REPORT_DIR ?= report
# Worlds side by side; empty: crashproof's default, one per core and one more.
JOBS ?=

.PHONY: setup test certify mutants bench clean

setup:
	@bash scripts/setup.sh

test: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

certify: setup
	$(VENV)/bin/crashproof certify $(if $(JOBS),--jobs $(JOBS)) --report-dir $(REPORT_DIR)

mutants: setup
	$(VENV)/bin/crashproof mutants $(if $(JOBS),--jobs $(JOBS)) --report-dir $(REPORT_DIR)

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(REPORT_DIR) .pytest_cache .hypothesis
