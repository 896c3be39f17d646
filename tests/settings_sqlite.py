"""The embedded default's settings, for the part of the suite that runs on it (``make
test`` runs it after the PostgreSQL run): SQLite, the in-process cache and channel
layer, no Redis. Tests marked ``production`` need the production topology
(PostgreSQL's locking, Redis, nginx, worker processes) and are left out of this run.
"""

import os

from tests.support.environment import set_test_defaults

_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
os.environ.pop("REDIS_URL", None)
os.environ.pop("DATABASE_URL", None)
set_test_defaults()
os.environ["GPUAAS_VAR_DIR"] = f"/tmp/gpuaas-test-sqlite-var-{_worker}"

from gpuaas.settings import *  # noqa: E402,F403

assert EMBEDDED  # noqa: F405
assert DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed; never used outside tests
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True  # as tests/settings.py: no walk of the finders per test client
