#!/usr/bin/env bash
# `make test`'s tests, in two streams side by side:
#   - the heavy ones (topologies, benchmark smokes, killed workers, the API fuzz), two workers;
#   - beside them, in order: the rest on PostgreSQL, the embedded default's part on SQLite
#     (tests/settings_sqlite.py), then the browser tests, which run on their own because
#     Playwright keeps an event loop in the test thread that the other tests' synchronous
#     channel-layer sends cannot share.
# Either stream alone kept two cores about 60 % busy: its tests wait on the servers and
# processes they start. One phase after another, the suite took about 28 minutes of a CI
# run (decision 0071).
# The heavy stream has test databases, Redis databases and var directories of its own,
# named from the bases the rest use (tests/settings.py). Its output is printed when both
# are done, and the run fails if either did.
set -u

PY=${PY:-.venv/bin/python}
SQLITE_TESTS=${SQLITE_TESTS:?the paths of the embedded default tests, from the Makefile}
LOG_DIR=var/test-logs
mkdir -p "$LOG_DIR"
HEAVY_LOG="$LOG_DIR/heavy.log"

database_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gpuaas}
redis_base=${GPUAAS_TEST_REDIS_URL:-${REDIS_URL:-redis://127.0.0.1:6379/1}}
var_base=${GPUAAS_TEST_VAR_DIR:-/tmp/gpuaas-test-var}
# Four Redis databases on: the rest's two workers use the base and the next one.
heavy_redis="${redis_base%/*}/$(((${redis_base##*/} + 4) % 16))"

# The PostgreSQL run, which the two streams share out by the `heavy` marker.
postgresql_run=("$PY" -m pytest -p no:cacheprovider --ignore=tests/e2e --ignore=tests/ops/test_make_run_path.py)

DATABASE_URL="${database_url}_heavy" GPUAAS_TEST_REDIS_URL="$heavy_redis" GPUAAS_TEST_VAR_DIR="${var_base}-heavy" \
	"${postgresql_run[@]}" -n 2 --durations=40 -m heavy >"$HEAVY_LOG" 2>&1 &
heavy=$!
echo "The heavy tests run beside the rest; their output follows the rest's ($HEAVY_LOG)."

rest=0
"${postgresql_run[@]}" -n auto --durations=30 -m "not heavy" || rest=1
# shellcheck disable=SC2086 # SQLITE_TESTS is a list of paths
"$PY" -m pytest -n auto -p no:cacheprovider --durations=20 --ds=tests.settings_sqlite \
	-m "not production" -k "not victoria" $SQLITE_TESTS || rest=1
"$PY" -m pytest -n 2 -p no:cacheprovider --durations=20 tests/e2e || rest=1

heavy_status=0
wait "$heavy" || heavy_status=$?
echo
echo "=================================== the heavy tests ($HEAVY_LOG) ==================================="
cat "$HEAVY_LOG"
if [ "$rest" -ne 0 ] || [ "$heavy_status" -ne 0 ]; then
	echo "make test: FAILED (the rest: $([ "$rest" -eq 0 ] && echo passed || echo failed); the heavy tests: exit $heavy_status)" >&2
	exit 1
fi
