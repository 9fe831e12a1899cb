# verl-otel: `make demo` runs the CPU demo of a real verl run with telemetry on; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip -q --disable-pip-version-check
VERL_VERSION ?= 0.9.1
STAMP := $(VENV)/.installed-$(VERL_VERSION)
VERL_EXTRAS := cachetools uvicorn fastapi 'TransferQueue>=0.1.10' pyzmq msgspec
STEPS ?= 5
OUT ?= ./verl-otel-data
# one planted slow step, so `verl-otel slow-steps` has something real to find (SLOW= for none)
SLOW ?= update_actor@3=3

.PHONY: install demo test test-fast lint prometheus verl-compat bench dashboards clean

$(STAMP): pyproject.toml verl_otel/_pth/verl_otel_autoload.pth
	@echo "[verl-otel] creating $(VENV) and installing: torch (CPU, from local disk), then verl $(VERL_VERSION) and verl-otel (a few minutes)"
	test -x $(PY) || python3 -m venv $(VENV)
	# the CPU build of torch lies on local disk; install it first so nothing pulls a CUDA build
	$(PIP) install torch==2.13.0 2>&1 | grep -v '^WARNING: Location' || true
	@echo "[verl-otel] torch installed; installing verl $(VERL_VERSION), its CPU extras and verl-otel ..."
	# verl's CPU install needs these beside it (missing from its base requirements); the [verl] extra pins 0.9.1
	$(PIP) install -e '.[test]' verl==$(VERL_VERSION) $(VERL_EXTRAS) 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -c 'import verl, verl_otel, opentelemetry.sdk' && rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

demo: install
	$(VENV)/bin/verl-otel demo --steps $(STEPS) --out $(OUT) $(foreach s,$(SLOW),--slow $(s))

# promtool and a real Prometheus for the rule/dashboard tests; amtool and a real Alertmanager for the delivery test
prometheus:
	@command -v promtool >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager >/dev/null; }
	@promtool --version 2>&1 | head -1

test: install prometheus lint
	$(PY) -m pytest -q -p no:cacheprovider tests

# ruff (lint + format) and mypy on verl_otel/, configured in pyproject.toml
lint: install
	$(PY) -m ruff check verl_otel
	$(PY) -m ruff format --check verl_otel
	$(PY) -m mypy

# everything but the real-verl runs (seconds, for quick iteration)
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider -m 'not verl' tests

# the same hook tests against older verl releases, each in its own venv
verl-compat:
	# today's PyPI resolves verl 0.8.0 to a pyarrow that needs numpy 2 (0.8.0 pins numpy < 2): pin the era's versions
	$(MAKE) VENV=.venv-verl080 VERL_VERSION=0.8.0 VERL_EXTRAS="cachetools uvicorn fastapi pyarrow==19.0.1 'datasets<4'" install
	.venv-verl080/bin/python -m pytest -q -p no:cacheprovider tests/test_hooks_compat.py
	$(MAKE) VENV=.venv-verl090 VERL_VERSION=0.9.0 install
	.venv-verl090/bin/python -m pytest -q -p no:cacheprovider tests/test_hooks_compat.py

bench: install
	$(PY) bench/run.py

dashboards: install
	$(PY) -m verl_otel.dashboards.build

clean:
	rm -rf $(VENV) .venv-verl0* verl-otel-data
