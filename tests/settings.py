"""Test settings: real PostgreSQL and Redis (started by ``make test``).

Each xdist worker gets its own test database (pytest-django) and its own Redis
database: tests clear the cache, which empties the whole Redis database, so
workers must never share one; and its own var directory. ``DATABASE_URL``,
``GPUAAS_TEST_REDIS_URL`` and ``GPUAAS_TEST_VAR_DIR`` pick the bases (another
checkout running tests at the same time should pick others).
"""

import os

from tests.support.environment import set_test_defaults

_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_worker_number = int(_worker.removeprefix("gw") or 0)

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpuaas")
# The base must name a database number (redis://host:port/N); subprocesses of a
# worker inherit the base and derive the same database.
_redis_base = os.environ.setdefault(
    "GPUAAS_TEST_REDIS_URL", os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/1")
)
_redis_server, _, _redis_db = _redis_base.rpartition("/")
os.environ["REDIS_URL"] = f"{_redis_server}/{(int(_redis_db) + _worker_number) % 16}"
# Production mode without an apps domain: most tests drive path-prefix routes, the
# embedded default's; those about apps domains set one.
os.environ.setdefault("GPUAAS_PATH_ROUTES", "accept-risk")
set_test_defaults()
# Assigned, not defaulted: xdist workers inherit the controller's environment, where a
# default would already name gw0's directory, and both workers would share one.
os.environ["GPUAAS_VAR_DIR"] = f"{os.environ.get('GPUAAS_TEST_VAR_DIR', '/tmp/gpuaas-test-var')}-{_worker}"
# The live servers a test starts share one pool with the test's own threads on a
# loaded machine: they wait for a connection rather than answer 503 (the shipped
# 1.5 s is tested in tests/ops/test_dependency_outages.py).
os.environ.setdefault("GPUAAS_DB_POOL_TIMEOUT", "10")

from gpuaas.settings import *  # noqa: E402,F403
from gpuaas.settings import CACHES  # noqa: E402

CACHES["default"]["KEY_PREFIX"] = f"test-{_worker}"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed; never used outside tests
# The production topologies tests start (prod-local, `serve`) share one collection of
# static files, made once (gpuaas.prodlocal.collect_static): each would take minutes.
# This process serves its own from the finders and keeps its (empty) root apart: its
# whitenoise walks that root, and an xdist worker inherits the controller's
# GPUAAS_STATIC_ROOT, which another worker may be collecting into at that moment.
os.environ.setdefault("GPUAAS_STATIC_ROOT", str(BASE_DIR / "var" / "test-static"))  # noqa: F405
STATIC_ROOT = VAR_DIR / "static"  # noqa: F405
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise wants it to exist
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
WHITENOISE_USE_FINDERS = True
# Each test client builds its own handler, and whitenoise walked every finder's files at
# each (a tenth of the portal tests' time): autorefresh finds a file when it is asked for.
WHITENOISE_AUTOREFRESH = True
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405 - server threads must not keep test DB sessions open
# Transactional tests flush with DELETE, not TRUNCATE, and its app's flush command
# leaves the rows the flush keeps alone (tests/support/flushing_postgresql).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["ENGINE"] = "tests.support.flushing_postgresql"  # noqa: F405
    INSTALLED_APPS = [*INSTALLED_APPS, "tests.support.flushing_postgresql"]  # noqa: F405
