# The two commands of README.md: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
UV := $(VENV)/bin/uv
PYTHON ?= python3
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# Bytecode is written, even where the environment asks not to (PYTHONDONTWRITEBYTECODE on
# these machines): without it each pytest worker rewrote every test module's asserts and
# each server a test starts compiled the portal anew (collection took 10.2 s a process
# rather than 4.2 s, 2026-11-29).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run prod-local test check install install-dev screenshots services sandbox sshd firewall browser nginx metrics-db node-deps bench-tools lint e2e bench fuzz clean

# `make run` installs what running needs (and JupyterLab, which the demo launches);
# `make test` and the other tool targets add the dev and test tools.
# Every version comes from requirements.lock (the constraints), so a fresh machine installs
# what CI tested and pip-audit checked, not the newest release of each range. uv installs
# them: 17 s for the dev set in a new virtualenv where pip took 64 s (2026-11-28).
$(STAMP): pyproject.toml requirements.lock
	@echo "Installing the portal's Python packages into $(VENV) (first run only)..."
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP) install -q -c requirements.lock uv
	@$(UV) pip install -q --python $(PY) -c requirements.lock -e ".[demo]"
	@touch $(STAMP)

$(DEV_STAMP): pyproject.toml requirements.lock $(STAMP)
	$(UV) pip install -q --python $(PY) -c requirements.lock -e ".[demo,dev]"
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

# One human line a step, the sign-in line last; the log lines go to var/log/gpuaas.log
# (GPUAAS_LOG_FORMAT=json: to the console). Ctrl-C stops everything.
run: install
	@echo "Python packages ready ($(VENV))"
	@bash scripts/ensure-sandbox.sh >/dev/null && echo "Workload sandbox (bubblewrap) ready"
	@bash scripts/ensure-sshd.sh >/dev/null && echo "SSH server for the local node ready"
	@$(PY) manage.py migrate --noinput -v 0 && echo "Database ready"
	@$(PY) manage.py bootstrap_demo >/dev/null && echo "Demo data ready: tenant demo, users demo and admin"
	@$(PY) manage.py serve --host 127.0.0.1 --port 8000

services:
	bash scripts/ensure-services.sh

sandbox:
	bash scripts/ensure-sandbox.sh

sshd:
	bash scripts/ensure-sshd.sh

browser:
	bash scripts/ensure-browser.sh

# nftables and iproute2: the agent's firewall for app ports on real nodes, tested in a
# network namespace (tests/node_agent/test_agent_firewall.py).
firewall:
	command -v nft >/dev/null && command -v ip >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables iproute2)

nginx:
	bash scripts/ensure-nginx.sh

# VictoriaMetrics: the metrics database the monitoring tests scrape real agents with
# (tests/support/victoria.py); the package's own service is left stopped.
metrics-db:
	command -v victoria-metrics >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends victoria-metrics)

node-deps:
	cd tests/e2e/oidc_provider && npm ci --silent --no-audit --no-fund

# wrk and JupyterHub's configurable-http-proxy: the proxy benchmark and its smoke test.
bench-tools:
	command -v wrk >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk)
	cd benchmarks/peers && npm ci --silent --no-audit --no-fund

# The embedded default's part of the suite, on SQLite with the in-process cache and
# channel layer (tests/settings_sqlite.py): the API and page families; tests marked
# `production` need PostgreSQL or Redis (decision 0035), and the monitoring tests'
# VictoriaMetrics variants are production's store, which the first phase runs.
SQLITE_TESTS := tests/portal tests/tenancy tests/catalog tests/core/test_error_envelope.py \
	tests/core/test_bad_input.py tests/core/test_pagination.py tests/core/test_idempotency.py \
	tests/core/test_openapi.py tests/core/test_audit.py tests/metering \
	tests/allocations/test_lifecycle_api.py tests/allocations/test_quota_and_capacity.py \
	tests/runtime/test_launch_api.py tests/runtime/test_launch_outlives_its_live_updates.py \
	tests/runtime/test_app_instance_quota.py tests/runtime/test_instance_logs.py \
	tests/storage/test_storage_resize.py tests/ops/test_make_run_path.py tests/access \
	tests/node_agent/test_terminal_ring.py tests/monitoring/test_gpu_metrics_api.py \
	tests/monitoring/test_embedded_store.py tests/monitoring/test_xid_events.py \
	tests/monitoring/test_alert_rules.py tests/monitoring/test_alert_delivery.py tests/monitoring/test_alerts_api.py \
	tests/monitoring/test_node_utilization_reports.py tests/node_agent/test_node_usage.py

# xdist's default (load) hands each worker a run of consecutive tests, so a heavy
# module mostly starts its topology once. scripts/run-tests.sh runs the heavy tests beside
# the rest (PostgreSQL, then SQLite, then the browser).
test: install-dev services sandbox sshd firewall browser nginx metrics-db node-deps bench-tools
	$(VENV)/bin/lint-imports
	PY=$(PY) bash scripts/check-migrations.sh
	$(PY) scripts/audit_dependencies.py
	PY=$(PY) SQLITE_TESTS="$(SQLITE_TESTS)" bash scripts/run-tests.sh

# The fast inner loop: lint, the layers (lint-imports) and every test but the `heavy`
# ones (benchmark smokes, prod-local, real JupyterLab kernels, killed workers, the API
# fuzz), the browser and nginx, which `make test` runs. Four workers on two cores: these
# tests wait on the servers and processes they start about half the time (three and six
# took longer, 2026-11-28). The migrations' checks run beside them, and the tests'
# databases are kept from the last run (--reuse-db still applies new migrations).
check: install-dev services sandbox sshd metrics-db
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	PY=$(PY) bash scripts/check-migrations.sh & migrations=$$!; \
	$(PY) -m pytest -n 4 --reuse-db -p no:cacheprovider -q --ignore=tests/e2e -k "not nginx" -m "not heavy" \
		--ignore=tests/ops/test_make_run_path.py; status=$$?; wait $$migrations && exit $$status

# Back up and restore (docs/operations.md): `make backup` writes the database and the
# secrets store's export to var/backups/<UTC time>/; `make restore BACKUP=<that directory>`
# restores it into the empty database of DATABASE_URL (FORCE=1 replaces a non-empty one).
.PHONY: backup restore
backup: install
	$(PY) manage.py backup

restore: install
	@test -n "$(BACKUP)" || (echo "usage: make restore BACKUP=var/backups/<time> [FORCE=1]" >&2; exit 2)
	$(PY) manage.py restore "$(BACKUP)" $(if $(FORCE),--force)

e2e: install-dev services browser node-deps
	$(PY) -m pytest tests/e2e -p no:cacheprovider

lint: install-dev
	$(VENV)/bin/ruff check .

# schemathesis against /api/schema/ longer than the smoke: every role gets the coverage
# phase and FUZZ_EXAMPLES generated cases per operation (about 20 minutes on two cores).
FUZZ_EXAMPLES ?= 50
fuzz: install-dev services sandbox
	GPUAAS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) GPUAAS_FUZZ_COVERAGE=all \
		$(PY) -m pytest -n auto -p no:cacheprovider -m fuzz tests/core/test_api_fuzz.py

bench: install-dev services nginx bench-tools metrics-db
	$(PY) benchmarks/api_auth.py
	$(PY) benchmarks/proxy.py
	$(PY) benchmarks/monitoring.py
	$(PY) benchmarks/load.py

# The README's screenshots (docs/screenshots/): the main pages at 1440 and 390 px, from
# a portal of their own seeded as `make run` seeds it.
screenshots: install-dev browser
	$(PY) scripts/screenshots.py

clean:
	rm -rf $(VENV) var

# The production process topology on this machine (decision 0062): two web processes
# behind Debian's nginx, a Celery worker and beat, each under supervisord, against the
# local PostgreSQL (database gpuaas_prodlocal) and Redis; the portal on
# http://localhost:8080, apps on *.apps.localhost. Ctrl-C stops it.
prod-local: install services nginx
	$(PY) -m gpuaas.prodlocal
