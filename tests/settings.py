"""Test settings: real PostgreSQL and Redis (started by ``make test``), one
Redis database and key prefix per xdist worker so parallel workers never share state."""

import os

_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_worker_number = int(_worker.removeprefix("gw") or 0)

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpuaas")
os.environ.setdefault("REDIS_URL", f"redis://127.0.0.1:6379/{1 + _worker_number % 15}")
os.environ.setdefault("GPUAAS_SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdef")
os.environ.setdefault("GPUAAS_ENCRYPTION_KEYS", "7qWutnD6fSYzo4mOWFApzU7RMK8droX-w4WLUJ5hkGc=")
os.environ.setdefault("GPUAAS_CELERY_EAGER", "true")
os.environ.setdefault("GPUAAS_SIMULATED_STEP_SECONDS", "0")
os.environ.setdefault("GPUAAS_VAR_DIR", f"/tmp/gpuaas-test-var-{_worker}")

from gpuaas.settings import *  # noqa: E402,F403
from gpuaas.settings import CACHES  # noqa: E402

CACHES["default"]["KEY_PREFIX"] = f"test-{_worker}"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed; never used outside tests
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405 - whitenoise wants it to exist
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
WHITENOISE_USE_FINDERS = True
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405 - server threads must not keep test DB sessions open
