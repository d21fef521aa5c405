# All set-up happens here: `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test test-fast install bench clean

# the demo needs the package only; the tests add their extra (pytest, hypothesis, Dask)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(TEST_STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tfgshare demo

# Every tier (about 15-30 min on 2 cores), then the 20 slowest tests.
test: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -ra --durations=20

# Everything without TensorFlow, a live cluster or a slow mark (tests/conftest.py marks them):
# a few minutes, for a change to the simulator, a policy, the coordinator or the client.
FAST := not tf and not live and not slow
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest -q -ra -m "$(FAST)" --durations=20

# Every benchmark in tools/; docs/benchmarks.md records their figures and how they were taken.
BENCHES := philly slim_data runner policies simulator coordinator agent
bench: $(STAMP)
	for b in $(BENCHES); do $(BIN)/python tools/bench_$$b.py || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
