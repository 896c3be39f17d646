#!/usr/bin/env bash
# The migrations policy's checks (docs/operations.md): the models and their migrations
# agree (`makemigrations --check`), and the migrations apply to an empty database and
# leave none unapplied (`migrate --check`). On the embedded default's SQLite in a
# throwaway var directory, so it never touches a real database; a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
var=$(mktemp -d)
trap 'rm -rf "$var"' EXIT
unset REDIS_URL DATABASE_URL
export GPUAAS_VAR_DIR="$var" DJANGO_SETTINGS_MODULE=gpuaas.settings
"$PY" manage.py makemigrations --check --dry-run
"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py migrate --check
