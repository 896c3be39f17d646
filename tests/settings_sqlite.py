"""The embedded default's settings, for the part of the suite that runs on it (``make
test`` runs it after the PostgreSQL run): SQLite, the in-process cache and channel
layer, no Redis. Tests marked ``production`` need the production topology
(PostgreSQL's locking, Redis, nginx, worker processes) and are left out of this run.
"""

import os

_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
os.environ.pop("REDIS_URL", None)
os.environ.pop("DATABASE_URL", None)
os.environ.setdefault("GPUAAS_SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdef")
os.environ.setdefault("GPUAAS_ENCRYPTION_KEYS", "7qWutnD6fSYzo4mOWFApzU7RMK8droX-w4WLUJ5hkGc=")
os.environ.setdefault("GPUAAS_CELERY_EAGER", "true")
os.environ.setdefault("GPUAAS_SIMULATED_STEP_SECONDS", "0")
# Log lines on the console, where pytest captures them (and the processes a test
# starts write them to their output), not in var/log/.
os.environ.setdefault("GPUAAS_LOG_FORMAT", "json")
os.environ["GPUAAS_VAR_DIR"] = f"/tmp/gpuaas-test-sqlite-var-{_worker}"

from gpuaas.settings import *  # noqa: E402,F403

assert EMBEDDED  # noqa: F405
assert DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed; never used outside tests
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True  # as tests/settings.py: no walk of the finders per test client
