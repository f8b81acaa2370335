# Two commands do all set-up on a fresh machine:
#   make demo   - create .venv, then a 2-worker launch of the bundled example
#   make test   - create .venv, then the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint docs bench compat-env

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[tf,test]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	rm -rf demo-run
	$(BIN)/tpuctl launch examples/train_keras.py --workers 2 --model-dir demo-run/model --log-dir demo-run/logs

# The ssh launch tests start real sshd servers (tests/integration/sshd.py): on a fresh
# Debian/Ubuntu machine, as root, install them here; elsewhere those tests skip, saying why.
SSHD := /usr/sbin/sshd
$(SSHD):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server rsync || \
		echo "note: installing openssh-server failed; the ssh tests will skip"; \
	else echo "note: $(SSHD) is missing and cannot be installed here; the ssh tests will skip"; fi

# The TensorBoard tab's page tests (tests/integration/test_tensorboard_page.py) drive Debian's headless Chromium
# through Selenium, never a downloaded browser: installed here as sshd is. Elsewhere those tests skip, saying
# why; under TPUCTL_REQUIRE_BROWSER=1 (.ci/run) they fail instead.
BROWSER := /usr/bin/chromedriver
$(BROWSER):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver || \
		echo "note: installing chromium failed; the browser tests will skip (and fail under TPUCTL_REQUIRE_BROWSER=1)"; \
	else echo "note: $(BROWSER) is missing and cannot be installed here; the browser tests will skip"; fi

# A second worker environment for the compatibility tests (tests/integration/test_compat_tf215.py):
# TensorFlow 2.15 + tensorflow-estimator, run through `tpuctl launch --python .venv-tf215/bin/python`.
# Built once (~30 s from the package registry). If it cannot be built, make goes on, the reason is in
# .venv-tf215/install-failed.txt, and the tests that need it skip saying so.
COMPAT := .venv-tf215
COMPAT_REQS := tests/integration/scripts/compat/requirements-tf215.txt
COMPAT_STAMP := $(COMPAT)/.installed

$(COMPAT_STAMP): $(COMPAT_REQS)
	@rm -rf $(COMPAT)
	@echo "building $(COMPAT) (TensorFlow 2.15 for the compatibility tests)"
	@if $(PYTHON) -m venv $(COMPAT) >$(COMPAT).log 2>&1 && \
		$(COMPAT)/bin/python -m pip install --quiet --disable-pip-version-check -r $(COMPAT_REQS) >>$(COMPAT).log 2>&1; then \
		touch $(COMPAT_STAMP); rm -f $(COMPAT).log; \
	else \
		mkdir -p $(COMPAT) && mv $(COMPAT).log $(COMPAT)/install-failed.txt; \
		echo "note: building $(COMPAT) failed (see $(COMPAT)/install-failed.txt); the TF 2.15 compatibility tests will skip"; \
	fi

compat-env: $(COMPAT_STAMP)

# Style and types first: a few seconds, and they fail before the slow part starts.
lint: $(STAMP)
	$(BIN)/ruff check tpuctl
	$(BIN)/mypy

# pytest-xdist workers: many tests wait on the processes they start (TensorFlow workers, sshd, stand-in servers,
# timeouts) rather than compute, so 4 keep 2 cores busy (measured on 2 cores: 3 left 12% of the CPU idle, 4 about
# 5%, 5 was no faster and its contention broke timing-sensitive tests). --dist loadfile: a module's tests share one
# worker, so a module-scoped fixture (one launch that several tests read) runs once. `make test PYTEST_WORKERS=0`
# runs serially.
PYTEST_WORKERS ?= 4

# Where the environment sets PYTHONDONTWRITEBYTECODE (this project's machines do), nothing caches compiled code, so:
# - compileall: every CLI, worker and agent process the tests start would compile tpuctl's modules from source again;
# - one collection pass with bytecode writing on caches pytest's assertion-rewritten test modules: each xdist worker
#   collects the whole suite and otherwise rewrites every module again (5 of its 8 CPU-s here). It runs beside ruff
#   and mypy, which use one core; a collection error it meets is reported by the real run.
test: $(STAMP) $(SSHD) $(BROWSER) $(COMPAT_STAMP)
	@PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider > /dev/null 2>&1 & \
		$(MAKE) --no-print-directory lint; status=$$?; wait; exit $$status
	$(BIN)/python -m compileall -q tpuctl > /dev/null
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

docs: $(STAMP)
	$(BIN)/python -m tpuctl.cli.reference > docs/cli-reference.md

bench: $(STAMP)
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/launch_overhead.py
	$(BIN)/python benchmarks/list_nodes.py
	$(BIN)/python benchmarks/offers.py
	$(BIN)/python benchmarks/hunt.py
	$(BIN)/python benchmarks/tail_reader.py
	$(BIN)/python benchmarks/ssh_fanout.py
	$(BIN)/python benchmarks/vertex_submit.py
	$(BIN)/python benchmarks/runs_listing.py
	$(BIN)/python benchmarks/timeline_overhead.py
	$(BIN)/python benchmarks/profiler_overhead.py
	$(BIN)/python benchmarks/report_big_timeline.py
	$(BIN)/python benchmarks/plugin_view.py
	$(BIN)/python benchmarks/sync_ignore.py
	$(BIN)/python benchmarks/env_setup.py
