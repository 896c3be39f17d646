"""Settings for both run modes.

Embedded default (no ``REDIS_URL``): SQLite under ``var/``, in-process cache,
channel layer and Celery broker, generated secrets kept in ``var/``.
Production: everything from the environment (see ``../shared/CONTRACT.md``).
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from apps.tenancy.auth import issuer_config
from gpuaas import env

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env.string("GPUAAS_VAR_DIR", str(BASE_DIR / "var")))

REDIS_URL = env.string("REDIS_URL")
EMBEDDED = not REDIS_URL
DEBUG = env.boolean("GPUAAS_DEBUG", False)
HTTPS = env.boolean("GPUAAS_HTTPS", False)


def _private_var_dir() -> None:
    """var/ holds the embedded default's secrets and its database: its owner's alone
    (an existing one is tightened too), and so is every file the process creates
    there (the database, its journal, the beat schedule, the agent's state)."""
    os.umask(0o077)
    VAR_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    VAR_DIR.chmod(0o700)


def _generated_secret(name: str, make) -> str:
    """A secret kept in var/ so the embedded default survives restarts."""
    path = VAR_DIR / name
    if not path.exists():
        _private_var_dir()
        path.touch(mode=0o600)
        path.write_text(make())
    return path.read_text().strip()


SECRET_KEY = env.string("GPUAAS_SECRET_KEY")
if not SECRET_KEY:
    if not (EMBEDDED or DEBUG):
        raise ImproperlyConfigured("GPUAAS_SECRET_KEY: required when GPUAAS_DEBUG is false")
    SECRET_KEY = _generated_secret("secret_key", lambda: secrets.token_urlsafe(50))

ENCRYPTION_KEYS = env.csv("GPUAAS_ENCRYPTION_KEYS")
if not ENCRYPTION_KEYS:
    if not (EMBEDDED or DEBUG):
        raise ImproperlyConfigured("GPUAAS_ENCRYPTION_KEYS: required outside the embedded default")
    ENCRYPTION_KEYS = [_generated_secret("encryption_key", lambda: Fernet.generate_key().decode())]
for _key in ENCRYPTION_KEYS:
    try:
        Fernet(_key)
    except ValueError as exc:
        raise ImproperlyConfigured(
            "GPUAAS_ENCRYPTION_KEYS: each key must be a urlsafe base64 32-byte key"
        ) from exc

# Where secrets live (apps/core/secrets): "local" keeps them in the database encrypted
# with the keys above; "vault" in HashiCorp Vault or OpenBao (KV v2).
SECRETS_BACKEND = env.choice("GPUAAS_SECRETS_BACKEND", "local", {"local", "vault"})
VAULT_ADDR = env.string("GPUAAS_VAULT_ADDR").rstrip("/")
VAULT_TOKEN = env.string("GPUAAS_VAULT_TOKEN")
VAULT_MOUNT = env.string("GPUAAS_VAULT_MOUNT", "secret")
VAULT_PREFIX = env.string("GPUAAS_VAULT_PREFIX", "gpuaas/")
VAULT_TIMEOUT_SECONDS = env.number("GPUAAS_VAULT_TIMEOUT_SECONDS", 10.0)
if VAULT_ADDR and not VAULT_ADDR.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"GPUAAS_VAULT_ADDR: expected an http(s) URL, got {VAULT_ADDR!r}")
if SECRETS_BACKEND == "vault" and not VAULT_ADDR:
    raise ImproperlyConfigured("GPUAAS_VAULT_ADDR: required when GPUAAS_SECRETS_BACKEND is vault")
if SECRETS_BACKEND == "vault" and not VAULT_TOKEN:
    raise ImproperlyConfigured("GPUAAS_VAULT_TOKEN: required when GPUAAS_SECRETS_BACKEND is vault")
if not VAULT_MOUNT or "/" in VAULT_MOUNT.strip("/") or VAULT_MOUNT.strip() != VAULT_MOUNT:
    raise ImproperlyConfigured(f"GPUAAS_VAULT_MOUNT: expected one KV v2 mount name, got {VAULT_MOUNT!r}")
VAULT_MOUNT = VAULT_MOUNT.strip("/")
if VAULT_PREFIX.startswith("/") or ".." in VAULT_PREFIX.split("/") or VAULT_PREFIX[-1:] not in ("", "/"):
    raise ImproperlyConfigured(
        f"GPUAAS_VAULT_PREFIX: expected a relative folder ending in / (gpuaas/), got {VAULT_PREFIX!r}"
    )

ALLOWED_HOSTS = env.csv("GPUAAS_ALLOWED_HOSTS", "127.0.0.1,localhost,.localhost")
ISSUER = env.string("GPUAAS_ISSUER", "http://127.0.0.1:8000").rstrip("/")
APPS_DOMAIN = env.string("GPUAAS_APPS_DOMAIN")
# The data plane asks the portal about app hosts (the grant, the session exchange) with
# their own Host: the portal answers for the apps domain it serves, whatever the list says.
if APPS_DOMAIN and f".{APPS_DOMAIN}" not in ALLOWED_HOSTS:
    ALLOWED_HOSTS.append(f".{APPS_DOMAIN}")
# Without an apps domain, apps are served under /w/ on the portal's own origin, where
# their scripts act with the signed-in user's session: the embedded default's choice
# for one person's machine. In production an operator must opt in explicitly.
PATH_ROUTES = env.string("GPUAAS_PATH_ROUTES")
if PATH_ROUTES not in ("", "accept-risk"):
    raise ImproperlyConfigured("GPUAAS_PATH_ROUTES: the only value is accept-risk")
if REDIS_URL and not APPS_DOMAIN and not PATH_ROUTES:
    raise ImproperlyConfigured(
        "GPUAAS_APPS_DOMAIN: required in production (REDIS_URL set), a wildcard domain whose hosts "
        "reach the data plane: without it apps share the portal's origin and their scripts act with "
        "its users' sessions. On a single host without wildcard DNS, GPUAAS_PATH_ROUTES=accept-risk "
        "serves them on the portal's origin anyway (docs/operator-guide.md)."
    )
# Shown to platform operators on every page while production runs apps on the portal's origin.
PATH_ROUTES_RISK_ACCEPTED = bool(REDIS_URL and not APPS_DOMAIN)
# "simulated" or "real" for every system, or per system: "maas=real,ndfc=real,ufm=simulated".
DRIVERS = env.driver_modes("GPUAAS_DRIVERS", "simulated", {"maas", "ndfc", "ufm", "ddn", "metrics"})
SIMULATED_STEP_SECONDS = env.number("GPUAAS_SIMULATED_STEP_SECONDS", 0.0)

INSTALLED_APPS = [
    "apps.portal.admin_apps.OperationsAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "guardian",
    "django_filters",
    "channels",
    "apps.core",
    "apps.tenancy",
    "apps.catalog",
    "apps.networking",
    "apps.storage",
    "apps.allocations",
    "apps.webhooks",
    "apps.runtime",
    "apps.metering",
    "apps.access",
    "apps.monitoring",
    "apps.proxy",
    "apps.portal",
    "axes",
]

MIDDLEWARE = [
    "apps.core.middleware.CorrelationIdMiddleware",
    "apps.core.metrics.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "apps.core.middleware.SecurityHeadersMiddleware",
    "apps.core.middleware.NulByteMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.core.middleware.ApiErrorMiddleware",
]

ROOT_URLCONF = "gpuaas.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "gpuaas.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.portal.context_processors.portal",
            ],
        },
    },
]

DATABASES = {"default": env.database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'gpuaas.sqlite3'}")}
# Under ASGI, persistent connections are not closed at the end of a request (they
# leak until garbage collection): connect per request, and on PostgreSQL reuse
# connections through psycopg's pool instead (Django's recommendation for ASGI).
DATABASES["default"]["CONN_MAX_AGE"] = 0
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.boolean("GPUAAS_DB_POOL", True):
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": env.integer("GPUAAS_DB_POOL_SIZE", 10),
        # How long a request waits for a connection before it answers 503: a database
        # that is down must not hold requests (apps/core/outages.py).
        "timeout": env.number("GPUAAS_DB_POOL_TIMEOUT", 1.5),
        # How long a failed connect is retried (backing off 1 s, 2 s, ...) before the pool
        # gives it up and the next request tries afresh: psycopg's 5 minutes let its
        # backoff grow past a minute, the pool not noticing PostgreSQL back for that long.
        "reconnect_timeout": env.number("GPUAAS_DB_POOL_RECONNECT_SECONDS", 3.0),
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 2)
# With the pool, this checks each connection as it is taken (psycopg's check_connection):
# after PostgreSQL restarts, the dead ones are replaced and the first request succeeds.
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    _private_var_dir()
    # The in-process worker and the web server write concurrently; WAL and a
    # busy timeout keep SQLite from answering "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    from redis import ConnectionError as RedisConnectionError
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {
                # A Redis that is down fails the request at once (503, apps/core/outages.py)
                # instead of redis-py's default ten retries; a connection it dropped when it
                # restarted is retried once on a new one, so the first request succeeds.
                "socket_connect_timeout": 1,
                "socket_timeout": 2,
                "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            },
        }
    }
    CHANNEL_LAYERS = {
        # redis-py 8 times out channels_redis' blocking reads without an explicit
        # socket timeout longer than its 5 s BZPOPMIN (django/channels_redis#422); the
        # layer's own class lets a consumer's cancellation through (apps/core/redis_pools.py).
        "default": {
            "BACKEND": "apps.core.redis_pools.RedisChannelLayer",
            # As the cache: a connection Redis dropped when it restarted is retried once on
            # a new one (a live update after a commit must not turn the request into a 503).
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": 30,
                        "retry": AsyncRetry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                    }
                ]
            },
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Celery: Redis in production; the memory broker with an in-process worker on
# the embedded default (``manage.py serve`` starts it).
# GPUAAS_BROKER_URL picks another broker (RabbitMQ, ``amqp://``: what Celery recommends
# for production); Redis otherwise.
CELERY_BROKER_URL = (env.string("GPUAAS_BROKER_URL") or REDIS_URL) if REDIS_URL else "memory://localhost/"
CELERY_RESULT_BACKEND = REDIS_URL or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env.boolean("GPUAAS_CELERY_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_WORKER_REDIRECT_STDOUTS = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

AUTH_USER_MODEL = "auth.User"
AUTHENTICATION_BACKENDS = [
    # First, so a locked-out username or address is refused before a password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 4}},
]
LOGIN_URL = "/accounts/login/"
# Password sign-in (portal and admin) is limited by django-axes (decision 0039): after
# AXES_FAILURE_LIMIT failures for a username, or LOGIN_FAILURES_PER_ADDRESS from a client
# address, within AXES_COOLOFF_TIME of each other, both login pages refuse that username
# or address until the cool-off has passed since its last failure.
AXES_HANDLER = "apps.tenancy.auth.passwords.SignInAttemptHandler"
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_FAILURE_LIMIT = 5
LOGIN_FAILURES_PER_ADDRESS = 20
AXES_COOLOFF_TIME = timedelta(minutes=15)
# Refused attempts neither count nor extend the lockout: it ends by itself.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# Only password attempts count: an OIDC callback without a user names no username.
AXES_WHITELIST_CALLABLE = "apps.tenancy.auth.passwords.not_a_password_attempt"
# REMOTE_ADDR only: uvicorn already resolves trusted proxies into it, while a
# client-sent X-Forwarded-For would let each guess pick a fresh address.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)
AXES_SENSITIVE_PARAMETERS = ["csrfmiddlewaretoken"]  # the password is always masked
AXES_DISABLE_ACCESS_LOG = True  # successful sign-ins are not recorded (no table growing for ever)
AXES_ENABLE_ADMIN = False  # lockouts are lifted through the audited user action instead
AXES_VERBOSE = False
# The login forms show the lockout themselves (a form error, 429 and Retry-After); Axes'
# middleware would answer with a page of its own instead of the login form.
SILENCED_SYSTEM_CHECKS = ["axes.W002"]
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# OIDC browser login (mozilla-django-oidc), on when the three variables are set.
OIDC_DISCOVERY_URL = env.string("GPUAAS_OIDC_DISCOVERY_URL")
OIDC_RP_CLIENT_ID = env.string("GPUAAS_OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env.string("GPUAAS_OIDC_CLIENT_SECRET")
OIDC_ENABLED = bool(OIDC_DISCOVERY_URL and OIDC_RP_CLIENT_ID and OIDC_RP_CLIENT_SECRET)
OIDC_RP_SIGN_ALGO = "RS256"
# Code flow with PKCE (S256), state and nonce. The IdP returns to /oidc/callback/
# with a top-level GET (query response mode), which carries the SameSite=Lax
# session cookie holding the state; form_post would not.
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_RP_SCOPES = env.string("GPUAAS_OIDC_SCOPES", "openid profile email")
OIDC_STORE_ID_TOKEN = True  # needed for RP-initiated logout (id_token_hint)
OIDC_OP_LOGOUT_URL_METHOD = "apps.tenancy.auth.oidc.provider_logout_url"
OIDC_TIMEOUT = 10
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?error=oidc"
if OIDC_ENABLED:
    AUTHENTICATION_BACKENDS.insert(1, "apps.tenancy.auth.oidc.PlatformOIDCBackend")

# Bearer JWTs from CCP's Keycloak (and other trusted issuers).
TRUSTED_ISSUERS = issuer_config.parse(env.json_value("GPUAAS_TRUSTED_ISSUERS", []))
# /metrics from anywhere but loopback needs an operator's session or this bearer token.
METRICS_TOKEN = env.string("GPUAAS_METRICS_TOKEN")
JWT_LEEWAY_SECONDS = 30
PLATFORM_TOKEN_LIFETIME_SECONDS = int(env.number("GPUAAS_TOKEN_LIFETIME_SECONDS", 600))
if not 300 <= PLATFORM_TOKEN_LIFETIME_SECONDS <= 900:
    raise ImproperlyConfigured("GPUAAS_TOKEN_LIFETIME_SECONDS: must be between 300 and 900")
CCP_ROLE_MAP = env.json_value("GPUAAS_CCP_ROLE_MAP", None)
# What a tenant, and each of its projects, keeps of what its admins (or CCP for it) make
# again and again (apps.core.bounds): 409 past it.
MAX_PROJECTS_PER_TENANT = env.integer("GPUAAS_MAX_PROJECTS_PER_TENANT", 100)
MAX_SERVICE_ACCOUNTS_PER_PROJECT = env.integer("GPUAAS_MAX_SERVICE_ACCOUNTS_PER_PROJECT", 50)
if MAX_PROJECTS_PER_TENANT < 1:
    raise ImproperlyConfigured("GPUAAS_MAX_PROJECTS_PER_TENANT: must be at least 1")
if MAX_SERVICE_ACCOUNTS_PER_PROJECT < 1:
    raise ImproperlyConfigured("GPUAAS_MAX_SERVICE_ACCOUNTS_PER_PROJECT: must be at least 1")

# GPU telemetry (apps.monitoring): a Prometheus-compatible query API that scrapes the
# agents (VictoriaMetrics in production), or, unset, the platform's own embedded store.
METRICS_URL = env.string("GPUAAS_METRICS_URL").rstrip("/")
METRICS_RETENTION_DAYS = env.integer("GPUAAS_METRICS_RETENTION_DAYS", 7)
if METRICS_RETENTION_DAYS < 1:
    raise ImproperlyConfigured("GPUAAS_METRICS_RETENTION_DAYS: must be at least 1")
# How often agents read their GPUs (and report them to the embedded store).
METRICS_INTERVAL_SECONDS = env.integer("GPUAAS_METRICS_INTERVAL_SECONDS", 15)
# The scrape targets (Prometheus file_sd JSON) the platform keeps current for the scraper.
METRICS_TARGETS_FILE = Path(
    env.string("GPUAAS_METRICS_TARGETS_FILE", str(VAR_DIR / "metrics" / "targets.json"))
)

# Alerting (apps.monitoring.alerts): how often the platform evaluates its alert rules,
# and how long a firing alert's condition must stay clear before it resolves (flap damping).
ALERT_EVALUATION_SECONDS = env.integer("GPUAAS_ALERT_EVALUATION_SECONDS", 15)
if not 1 <= ALERT_EVALUATION_SECONDS <= 60:
    # Past 60 s an alert can no longer reach CCP within the contract's 60 s.
    raise ImproperlyConfigured("GPUAAS_ALERT_EVALUATION_SECONDS: between 1 and 60")
ALERT_RESOLVE_AFTER_SECONDS = env.integer("GPUAAS_ALERT_RESOLVE_AFTER_SECONDS", 60)
if ALERT_RESOLVE_AFTER_SECONDS < 0:
    raise ImproperlyConfigured("GPUAAS_ALERT_RESOLVE_AFTER_SECONDS: 0 or more")
# How long a resolved alert is listed (``GET /api/alerts``, the pages) before it is deleted;
# every episode is a row, so a flapping condition would otherwise grow the table for ever.
ALERT_RETENTION_DAYS = env.integer("GPUAAS_ALERT_RETENTION_DAYS", 90)
if ALERT_RETENTION_DAYS < 1:
    raise ImproperlyConfigured("GPUAAS_ALERT_RETENTION_DAYS: must be at least 1")
# Whether a tenant may subscribe a URL on a private address (the platform's own network).
ALERT_PRIVATE_URLS = env.boolean("GPUAAS_ALERT_PRIVATE_URLS", False)

CCP_WEBHOOK_URL = env.string("GPUAAS_CCP_WEBHOOK_URL")
CCP_WEBHOOK_SECRET = env.string("GPUAAS_CCP_WEBHOOK_SECRET")
if CCP_WEBHOOK_URL and not CCP_WEBHOOK_SECRET:
    # Signed with an empty key, every delivery would be refused by CCP and end a dead letter.
    raise ImproperlyConfigured("GPUAAS_CCP_WEBHOOK_SECRET: required when GPUAAS_CCP_WEBHOOK_URL is set")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.tenancy.auth.authentication.BearerTokenAuthentication",
        "apps.tenancy.auth.authentication.PortalSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["apps.core.throttling.PrincipalRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"principal": env.string("GPUAAS_API_RATE_LIMIT", "1200/min")},
    "DEFAULT_PAGINATION_CLASS": "apps.core.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "apps.core.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "apps.core.parsers.ObjectJSONParser",
        "rest_framework.parsers.FormParser",
    ],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPUaaS portal API",
    "DESCRIPTION": "CCP integration API and the platform API. Errors use one envelope: "
    '{"error": {"code", "message", "correlation_id", "details"}}.',
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # Node agents' endpoints are in a document of their own (AGENT_SPECTACULAR_SETTINGS).
    "PREPROCESSING_HOOKS": ["apps.core.schema.without_agent_endpoints"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.core.schema.add_error_responses",
        "apps.core.schema.tag_operations",
    ],
    # The groups of the public document, in the order Swagger UI lists them
    # (apps.core.schema.tag_operations puts each operation in one).
    "TAGS": [
        {"name": "tenancy", "description": "Tenants, projects, members, service accounts, tokens, audit."},
        {"name": "allocations", "description": "Bare-metal nodes: allocate, follow, release."},
        {"name": "catalog", "description": "The apps a tenant may launch and their versions."},
        {"name": "instances", "description": "Launched apps: start, stop, share, events, proxies."},
        {"name": "metering", "description": "Usage, quotas and the billing export."},
        {"name": "monitoring", "description": "GPU metrics and alerts."},
        {"name": "access", "description": "SSH keys, host access, access credentials and project secrets."},
    ],
    "APPEND_COMPONENTS": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}}
    },
    "SECURITY": [{"bearer": []}],
    # One enum component per choice set (otherwise the names get hash suffixes).
    "ENUM_NAME_OVERRIDES": {
        "AuthorizedKeyPurposeEnum": "apps.access.models.AuthorizedKey.Purpose",
        "RoleEnum": "apps.tenancy.roles.Role",
        "ProjectRoleEnum": ["project_admin", "viewer"],
        "LimitEnum": "apps.tenancy.roles.Limit",  # model fields (with labels)
        "LimitChoiceEnum": ["compute", "kubernetes"],  # the same set in input serializers
        "AllocationStateEnum": "apps.allocations.models.Allocation.State",
        "AppInstanceStateEnum": "apps.runtime.models.AppInstance.State",
        "OperationStateEnum": "apps.runtime.models.Operation.State",
        "StepStatusEnum": "apps.allocations.models.AllocationStep.Status",
        "DeliveryStatusEnum": "apps.webhooks.models.Delivery.Status",
        "TenantStatusEnum": "apps.tenancy.models.Tenant.Status",
        "StorageStatusEnum": "apps.storage.models.TenantStorage.Status",
    },
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Collected (hashed, compressed) static files: `collectstatic` writes them, whitenoise serves
# them. Several production topologies on one machine (the tests) share one collection.
STATIC_ROOT = Path(env.string("GPUAAS_STATIC_ROOT") or VAR_DIR / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if EMBEDDED or DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = EMBEDDED or DEBUG
if WHITENOISE_USE_FINDERS:
    # Files come from the finders; whitenoise still wants its root to exist.
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# Cookies and transport security.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = 8 * 3600
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = True
# A stale token (rotated at sign-in) gets a portal page, not Django's bare one.
CSRF_FAILURE_VIEW = "apps.portal.views.errors.csrf_failure"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
if HTTPS:
    # __Host-: the browser takes these only from this exact origin, Secure, Path=/ and
    # without Domain, so no app on a sibling host can set or shadow them.
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
CSRF_TRUSTED_ORIGINS = env.csv("GPUAAS_CSRF_TRUSTED_ORIGINS", ISSUER)

# JSON lines, to var/log/gpuaas.log by default, so the terminal of `make run` keeps the
# human lines; GPUAAS_LOG_FORMAT=json sends them to the console instead (containers,
# systemd: whatever collects stderr). Every process of the embedded default (serve, its
# local agent, manage.py commands) appends to the same file.
LOG_FORMAT = env.choice("GPUAAS_LOG_FORMAT", "file", {"file", "json"})
LOG_FILE = VAR_DIR / "log" / "gpuaas.log"
if LOG_FORMAT == "file":
    LOG_FILE.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _LOG_HANDLER = {"class": "logging.handlers.WatchedFileHandler", "filename": str(LOG_FILE)}
else:
    _LOG_HANDLER = {"class": "logging.StreamHandler"}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"correlation": {"()": "apps.core.logging.CorrelationIdFilter"}},
    "formatters": {"json": {"()": "apps.core.logging.JsonFormatter"}},
    "handlers": {"json": {**_LOG_HANDLER, "formatter": "json", "filters": ["correlation"]}},
    "root": {"handlers": ["json"], "level": env.string("GPUAAS_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "celery": {"level": "WARNING"},
        "uvicorn.access": {"level": "WARNING"},
        # Its INFO line for every request names the whole URL, a password in it included
        # (GPUAAS_METRICS_URL, GPUAAS_CCP_WEBHOOK_URL) and a receiver's token in its path.
        "httpx": {"level": "WARNING"},
        # Failures and refusals are gpuaas.auth lines already (decision 0039).
        "axes": {"level": "ERROR"},
    },
}

# --- Bare-metal provisioning -------------------------------------------------
DRIVER_HTTP_TIMEOUT = env.number("GPUAAS_DRIVER_HTTP_TIMEOUT", 15.0)
MAAS_URL = env.string("GPUAAS_MAAS_URL", "http://127.0.0.1:5240/MAAS")
MAAS_API_KEY = env.string("GPUAAS_MAAS_API_KEY")
NDFC_URL = env.string("GPUAAS_NDFC_URL", "https://127.0.0.1")
NDFC_USER = env.string("GPUAAS_NDFC_USER", "admin")
NDFC_PASSWORD = env.string("GPUAAS_NDFC_PASSWORD")
NDFC_FABRIC = env.string("GPUAAS_NDFC_FABRIC", "gpu-fabric")
# --- Storage: DDN over SSH to its MGS, UFM over REST (decision 0067) ---------
DDN_SSH_HOST = env.string("GPUAAS_DDN_SSH_HOST")
DDN_SSH_PORT = env.integer("GPUAAS_DDN_SSH_PORT", 22)
DDN_SSH_USER = env.string("GPUAAS_DDN_SSH_USER", "root")
DDN_SSH_KEY_FILE = env.string("GPUAAS_DDN_SSH_KEY_FILE")
DDN_SSH_KNOWN_HOSTS = env.string("GPUAAS_DDN_SSH_KNOWN_HOSTS")
DDN_SSH_TIMEOUT = env.number("GPUAAS_DDN_SSH_TIMEOUT", 30.0)
DDN_SSH_PERSIST = env.integer("GPUAAS_DDN_SSH_PERSIST", 60)
DDN_LNET = env.string("GPUAAS_DDN_LNET", "o2ib")
UFM_URL = env.string("GPUAAS_UFM_URL", "https://127.0.0.1")
UFM_USER = env.string("GPUAAS_UFM_USER", "admin")
UFM_PASSWORD = env.string("GPUAAS_UFM_PASSWORD")
UFM_TOKEN = env.string("GPUAAS_UFM_TOKEN")
STORAGE_TIER_QUOTA_GB = env.json_value(
    "GPUAAS_STORAGE_TIER_QUOTA_GB", {"standard": 10240, "premium": 51200, "enterprise": 204800}
)
OS_IMAGES = env.csv("GPUAAS_OS_IMAGES", "ubuntu-22.04,ubuntu-24.04,rocky-9")
# Seconds each pipeline step may take before it fails with a reason naming it.
PIPELINE_STEP_BUDGETS = {
    "network": 300,
    "os_deploy": 2400,
    "storage": 300,
    "agent": 900,
    "drain": 600,
    "access_revoke": 300,
    "storage_detach": 300,
    "os_release": 2400,
    "network_detach": 300,
    **env.json_value("GPUAAS_STEP_BUDGETS", {}),
}
PIPELINE_MAX_RETRIES = 3  # seed 001 section 8.2: BM provisioning
PIPELINE_BACKOFF_SECONDS = (env.number("GPUAAS_PIPELINE_BACKOFF_SECONDS", 5.0), 60.0)
PIPELINE_POLL_SECONDS = env.number("GPUAAS_PIPELINE_POLL_SECONDS", 2.0)
# A worker renews its lease on an allocation every third of this while it runs steps;
# the reconciler resumes one whose lease ran out: a crashed worker's allocations are
# picked up within lease + reconcile interval (45 s).
PIPELINE_LEASE_SECONDS = env.number("GPUAAS_PIPELINE_LEASE_SECONDS", 30.0)
PIPELINE_RECONCILE_SECONDS = env.number("GPUAAS_PIPELINE_RECONCILE_SECONDS", 15.0)
PIPELINE_BREAKER = {"threshold": 5, "window": 30}
AUTO_APPROVE_NODES = env.boolean("GPUAAS_AUTO_APPROVE_NODES", EMBEDDED)
WEBHOOK_TIMEOUT_SECONDS = env.number("GPUAAS_WEBHOOK_TIMEOUT_SECONDS", 10.0)
WEBHOOK_JITTER = True
# Networks a tenant's webhook receiver may be on although they are not public (an
# on-premises CCP's); GPUAAS_ALERT_PRIVATE_URLS=true allows every address.
WEBHOOK_ALLOWED_NETWORKS = env.networks("GPUAAS_WEBHOOK_ALLOWED_NETWORKS")
# How deliveries to tenants' receivers resolve names: None, the system's resolver;
# tests give a function (host, port) -> [address, ...] to play DNS.
WEBHOOK_RESOLVER = None

# --- Metering ----------------------------------------------------------------------
# The currency of every rate (flavors' node-hour rates, metering.Rate) and of the
# billing export's amounts.
BILLING_CURRENCY = env.string("GPUAAS_BILLING_CURRENCY", "USD")

# --- App runtime -----------------------------------------------------------------
LAUNCH_LIMIT_PER_PROJECT = env.integer("GPUAAS_LAUNCH_LIMIT_PER_PROJECT", 5)
LAUNCH_LIMIT_PER_NODE = env.integer("GPUAAS_LAUNCH_LIMIT_PER_NODE", 3)
AGENT_OFFLINE_AFTER_SECONDS = env.integer("GPUAAS_AGENT_OFFLINE_AFTER_SECONDS", 45)
AGENT_POLL_SECONDS = 25
AGENT_TASK_TIMEOUT_SECONDS = env.integer("GPUAAS_AGENT_TASK_TIMEOUT_SECONDS", 900)
# The addresses (or networks) the platform proxy connects to apps from, as nodes see
# them (nginx replicas, the portal's own proxy). A node's agent lets only these reach
# its apps' ports (decision 0037); unset, apps start only on loopback (the embedded
# default's local agent), never on a node's network address.
PROXY_SOURCE_ADDRESSES = env.networks("GPUAAS_PROXY_SOURCE_ADDRESSES")

# --- Web terminal (apps/access, issue 17) -------------------------------------------
# A project's idle timeout, maximum duration and recording retention are its
# TerminalPolicy (admin); these are the platform's bounds around them.
TERMINAL_OPEN_TIMEOUT_SECONDS = 15  # the node agent must pick a new session up within this
TERMINAL_DETACHED_SECONDS = env.integer("GPUAAS_TERMINAL_DETACHED_SECONDS", 300)  # no browser attached
# How often a terminal's agent socket reads whether its session was ended elsewhere: the
# news goes over the channel layer, which may have lost it (a Redis outage), and the
# shell must not outlive its session.
TERMINAL_ENDED_CHECK_SECONDS = 5.0
TERMINAL_MAX_LIVE_PER_ALLOCATION = env.integer("GPUAAS_TERMINAL_MAX_LIVE_PER_ALLOCATION", 8)
TERMINAL_MAX_INPUT_BYTES = 64 * 1024  # one message from the browser (a paste)
TERMINAL_RECORDING_MAX_CHARS = env.integer("GPUAAS_TERMINAL_RECORDING_MAX_CHARS", 8 * 1024 * 1024)
# How long an ended session's row (who had a shell on which node, when, why it ended)
# outlives the session: longer than a recording is kept, as the record of access is
# worth more than the bytes; never shorter than its own recording, whose replay needs it.
TERMINAL_SESSION_RETENTION_DAYS = env.integer("GPUAAS_TERMINAL_SESSION_RETENTION_DAYS", 365)
if TERMINAL_SESSION_RETENTION_DAYS < 1:
    raise ImproperlyConfigured("GPUAAS_TERMINAL_SESSION_RETENTION_DAYS: must be at least 1")

# --- Platform proxy ----------------------------------------------------------------
# Hard limits (and the longest idle timeout) that manifests, pools and tenant policy
# can only lower (seed 003 "Protection Model").
PROXY_MAX_CONNECTIONS_PER_INSTANCE = env.integer("GPUAAS_PROXY_MAX_CONNECTIONS_PER_INSTANCE", 200)
PROXY_MAX_CONNECTIONS_PER_USER = env.integer("GPUAAS_PROXY_MAX_CONNECTIONS_PER_USER", 64)
PROXY_IDLE_TIMEOUT_SECONDS = env.integer("GPUAAS_PROXY_IDLE_TIMEOUT_SECONDS", 24 * 3600)
PROXY_TICKET_SECONDS = 60
PROXY_SESSION_SECONDS = env.integer("GPUAAS_PROXY_SESSION_SECONDS", 8 * 3600)
# How long a request's authorization decision is reused (invalidated early on logout,
# revocation and stop).
PROXY_AUTHZ_CACHE_SECONDS = 5
PROXY_UPSTREAM_CONNECT_SECONDS = 5.0
# The ASGI proxy's Redis (decisions, connection counts): a command that takes longer
# fails its request with 503; connections per process and event loop.
PROXY_REDIS_TIMEOUT_SECONDS = env.number("GPUAAS_PROXY_REDIS_TIMEOUT_SECONDS", 2.0)
PROXY_REDIS_CONNECTIONS = 32
# nginx as the data plane (docker/nginx.conf) asks GET /_gpuaas/auth for the grants it
# keeps a few seconds, and proves it is nginx with this shared secret; unset, the
# endpoint refuses everyone.
PROXY_AUTH_SECRET = env.string("GPUAAS_PROXY_AUTH_SECRET")
