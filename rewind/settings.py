"""zerto-rewind settings: one module, read from the environment.

With nothing set the service runs on the embedded default (SQLite in WAL mode and the
``filesystem://`` Celery broker, both under ``REWIND_VAR_DIR``). ``DATABASE_URL`` and
``REDIS_URL`` switch to PostgreSQL and Redis. docs/configuration.md lists every variable
(tests/test_docs.py holds it to what this module reads).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from rewind.lib.crypto import new_signing_key, signing_key
from rewind.lib.env import (
    check_redis_url,
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_networks,
    env_secret,
    env_str,
    sqlite_database,
)
from rewind.notifications.config import notify_urls_setting, site_notify_urls_setting
from rewind.oauth.config import oauth2_provider_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("REWIND_VAR_DIR") or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _persistent_secret(name: str, file_name: str, make: object) -> str:
    """NAME from the environment, else a value generated once and kept under VAR_DIR."""
    value = env_secret(name)
    if value:
        return value
    path = VAR_DIR / file_name
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(make(), encoding="utf-8")  # type: ignore[operator]
    return path.read_text(encoding="utf-8").strip()


def _secret_file(name: str, file_name: str) -> Path | None:
    """The file ``_persistent_secret`` reads NAME from; None when the environment holds the value itself."""
    given = env_str(f"{name}_FILE")
    if given:
        return Path(given).resolve()
    return None if env_str(name) else (VAR_DIR / file_name).resolve()


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


SECRET_KEY = _persistent_secret("DJANGO_SECRET_KEY", "secret.key", lambda: secrets.token_urlsafe(50))
# Encrypts ZVM passwords at rest. Losing it means re-entering every site's password.
REWIND_ENCRYPTION_KEY = _persistent_secret("REWIND_ENCRYPTION_KEY", "encryption.key", _fernet_key)
# Signs the audit chain's anchors (rewind/audit/anchors.py); kept out of the database on purpose.
REWIND_AUDIT_ANCHOR_KEY = _persistent_secret("REWIND_AUDIT_ANCHOR_KEY", "audit-anchor.key", new_signing_key)
signing_key(REWIND_AUDIT_ANCHOR_KEY)  # a malformed key stops start-up, naming the setting
# Where it was read from (``manage.py check --deploy`` warns when that is beside the database).
REWIND_AUDIT_ANCHOR_KEY_PATH = _secret_file("REWIND_AUDIT_ANCHOR_KEY", "audit-anchor.key")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
REWIND_PORT = env_int("REWIND_PORT", 8000, minimum=1)  # where make run serves
REWIND_SIM_PORT = env_int("REWIND_SIM_PORT", 9443, minimum=1)  # where make run's ZVM simulator serves
REWIND_PUBLIC_URL = (env_str("REWIND_PUBLIC_URL") or f"http://127.0.0.1:{REWIND_PORT}").rstrip("/")
# Unset, the admin's "Connect an agent" page gives clients the address it was opened at
# rather than the default above (rewind.mcp.endpoint).
REWIND_PUBLIC_URL_CONFIGURED = env_str("REWIND_PUBLIC_URL") is not None

INSTALLED_APPS = [
    "rewind.dashboard.apps.OperatorsAdminConfig",  # Django's admin, with the dashboard as its index
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files served from here: the deployment may have no internet
    "django_celery_results",
    "oauth2_provider",  # the authorization server behind agents' OAuth sign-in (rewind.oauth)
    "axes",  # sign-in throttling and lock-out (rewind/signin.py)
    "rewind",
    "catalog",
    "recoveries",
]

MIDDLEWARE = [
    "rewind.lib.requestid.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Last, as axes asks: it turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

# --- The web front: sign-in, content security policy, cookies and TLS (docs/deployment.md, security.md) ---
AUTHENTICATION_BACKENDS = ["rewind.signin.SignInBackend", "django.contrib.auth.backends.ModelBackend"]
# After this many failed logins of one username from one address, that pair is refused for the
# lock-out's minutes (HTTP 429), the right password included; a success resets the count.
AXES_FAILURE_LIMIT = env_int("REWIND_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("REWIND_LOGIN_LOCKOUT_MIN", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
# Behind a reverse proxy the client's address is the proxy's unless it is taken from X-Forwarded-For.
AXES_IPWARE_PROXY_COUNT = env_int("REWIND_PROXY_COUNT", 0, minimum=0) or None
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if AXES_IPWARE_PROXY_COUNT else ["REMOTE_ADDR"]
)

# Every page of ours and the admin's runs without inline script or style: nothing else may run.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# Served over TLS (REWIND_PUBLIC_URL is https): cookies only over TLS, HSTS, plain HTTP redirected.
REWIND_TLS = REWIND_PUBLIC_URL.startswith("https://")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = REWIND_TLS
SECURE_SSL_REDIRECT = env_bool("REWIND_SSL_REDIRECT", REWIND_TLS)
SECURE_HSTS_SECONDS = env_int("REWIND_HSTS_SECONDS", 31_536_000 if REWIND_TLS else 0, minimum=0)
# HSTS covers the service's own host and the hosts below it (x.rewind.example.com), not its parent domain.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("REWIND_HSTS_INCLUDE_SUBDOMAINS", True)
# Preloading is a request to the browsers' makers, the domain owner's decision: off unless asked
# for, and its deploy check (W021, which wants it on) silenced for that reason.
SECURE_HSTS_PRELOAD = env_bool("REWIND_HSTS_PRELOAD", False)
# django-oauth-toolkit warns that http redirect URIs are allowed (W008): a native MCP client's
# callback is http on a loopback port (RFC 8252), and the consent view refuses http anywhere else.
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"] + ([] if SECURE_HSTS_PRELOAD else ["security.W021"])
# TLS ends at a reverse proxy that says so in X-Forwarded-Proto (only trust it behind one that sets it).
if env_bool("REWIND_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

ROOT_URLCONF = "rewind.urls"
ASGI_APPLICATION = "rewind.asgi.application"
WSGI_APPLICATION = "rewind.wsgi.application"

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
            ],
        },
    },
]

_database_url = env_str("DATABASE_URL")
DATABASES = {
    "default": (
        database_from_url("DATABASE_URL", _database_url, var_dir=VAR_DIR)
        if _database_url
        else sqlite_database(VAR_DIR / "rewind.sqlite3", test_path=VAR_DIR / "test_rewind.sqlite3")
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# How long an agent's call keeps trying a database that does not answer (a restart, a failover)
# before it fails; what it reads and the audit row of the call are retried, never an action.
REWIND_DB_RETRY_S = env_float("REWIND_DB_RETRY_S", 15.0, minimum=0.0)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# uvicorn does not serve /static/; the ASGI app wraps Django in the static-files handler
# unless a front proxy serves collected files.
REWIND_SERVE_STATIC = env_bool("REWIND_SERVE_STATIC", True)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "rewind.api.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "rewind.lib.rest.schema.RewindAutoSchema",
}

# --- OpenAPI schema (/api/schema/) and its docs page (/api/docs/) ---------------------------
# They describe every route, so by default only a signed-in person may read them (rewind.lib.rest.docs).
REWIND_API_DOCS_PUBLIC = env_bool("REWIND_API_DOCS_PUBLIC", False)
SPECTACULAR_SETTINGS = {
    "TITLE": "zerto-rewind REST API",
    "DESCRIPTION": (
        "The operators' API: guards, recoveries, the catalog, sites, agents and the audit log.\n\n"
        "Sign in through the admin (`/admin/login/`): every call carries the session cookie, and a "
        "call that changes something also the `X-CSRFToken` header with the value of the `csrftoken` "
        "cookie. Every route needs a staff account holding the permission its description names. "
        "Agents' bearer tokens are accepted only by the download of a recovered file.\n\n"
        'Errors are JSON: `{"detail": "..."}` (sometimes with more keys that say what went wrong), '
        'and for invalid input one list of messages per field, e.g. `{"vm_arg": ["..."]}`.'
    ),
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": "/api/",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rewind.lib.rest.permissions.ApiDocsPermission"],
    # Requests and responses of the same serializer differ (read-only fields): two components.
    "COMPONENT_SPLIT_REQUEST": True,
    # Django's <int:...> matches digits only: -1 is no route at all (an HTML 404), so say so.
    "PATH_CONVERTER_OVERRIDES": {"int": {"type": "integer", "minimum": 0}},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Several models have a "status": each choice set gets its own name in the schema.
    "ENUM_NAME_OVERRIDES": {
        "GuardStatusEnum": "rewind.checkpoints.models.ChangeGuard.Status",
        "TaggedCheckpointStatusEnum": "rewind.checkpoints.models.ChangeGuardVpg.Status",
        "RecoveryStatusEnum": "recoveries.models.RecoveryRequest.Status",
        "SightingStatusEnum": "catalog.models.ToolSighting.Status",
        "ActorTypeEnum": "rewind.audit.models.AuditEvent.ActorType",
        "GatewayPolicyEnum": "rewind.gateway.models.Policy",
        "UpstreamTransportEnum": "rewind.gateway.models.Upstream.Transport",
        "PolicyDecisionEnum": "rewind.policy.models.Decision",
        "StopScopeEnum": "rewind.policy.models.StopSwitch.Scope",
    },
}

# --- Celery -------------------------------------------------------------------------
_redis_url = env_str("REDIS_URL")
if _redis_url:
    CELERY_BROKER_URL = check_redis_url("REDIS_URL", _redis_url)
    # kombu's own dies on a Redis restart while it holds unacknowledged messages (rewind/lib/redisbroker.py).
    CELERY_BROKER_TRANSPORT = "rewind.lib.redisbroker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        # Above the longest task: an unacknowledged message is redelivered after this.
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 3600, minimum=5),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
else:
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        # kombu does not create these, and its default control folder is relative to the cwd.
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    # kombu's own can hand a worker a half-written message, lost with the worker (rewind/lib/fsbroker.py).
    CELERY_BROKER_TRANSPORT = "rewind.lib.fsbroker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        "control_folder": str(_broker_dir / "control"),
        "polling_interval": 0.05,  # the default 1.0 s adds a second to every task (measured)
    }
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A task running when the broker connection breaks runs to its end (every task here is safe to run
# twice): cancelling it would cut a recovery's download or a poll round's insert short for a blip.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# How long the worker's ETA timer may sleep before it looks at its schedule again. A countdown
# task (the pollers' next round) that arrives while the timer sleeps towards a later entry waits
# for that sleep to end: at the default 1 s, rounds ran up to a second after their time.
CELERY_WORKER_TIMER_PRECISION = 0.05
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT_S", 3600, minimum=10)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- ZVM -----------------------------------------------------------------------------
ZVM_CONNECT_TIMEOUT_S = env_float("ZVM_CONNECT_TIMEOUT_S", 5.0, minimum=0.1)
ZVM_READ_TIMEOUT_S = env_float("ZVM_READ_TIMEOUT_S", 30.0, minimum=0.1)
# Requests per second to one ZVM from all our processes together (a site may override it);
# counted in Redis when there is one, else in the database. At most 1000: see rewind/zvm/pacing.py.
ZVM_MAX_REQUESTS_PER_S = env_float("ZVM_MAX_REQUESTS_PER_S", 10.0, above=0, maximum=1000)
# A site's circuit opens after this many consecutive failed calls (one timeout is enough);
# then calls to it fail at once, and one trial call per probe period (doubling up to the
# maximum while trials fail) is let through, across every process. See rewind/zvm/breaker.py.
ZVM_CIRCUIT_FAILURES = env_int("ZVM_CIRCUIT_FAILURES", 3, minimum=1)
ZVM_CIRCUIT_PROBE_S = env_float("ZVM_CIRCUIT_PROBE_S", 30.0, minimum=0.1)
ZVM_CIRCUIT_PROBE_MAX_S = env_float("ZVM_CIRCUIT_PROBE_MAX_S", 300.0, minimum=0.1)
# Opens and closes of one site's circuit within this many seconds of the last audited one are
# only counted; the next audited one (or the probe's summary) carries the count of flaps.
ZVM_CIRCUIT_AUDIT_QUIET_S = env_float("ZVM_CIRCUIT_AUDIT_QUIET_S", 600.0, minimum=0)
# Where the request cap is counted and Keycloak tokens are shared (None: the database).
ZVM_SHARED_REDIS_URL = _redis_url or None
# How often every enabled site's ZVM is asked who it is (identity, version, clock, last error).
REWIND_SITE_REFRESH_INTERVAL_S = env_int("REWIND_SITE_REFRESH_INTERVAL_S", 600, minimum=30)
# Per-site cache of VM/VPG look-ups, so find_protection does not hit the ZVM for every call.
REWIND_LOOKUP_CACHE_S = env_float("REWIND_LOOKUP_CACHE_S", 10.0, minimum=0)

# --- Guard and checkpoints -------------------------------------------------------------
REWIND_CHECKPOINT_TIMEOUT_S = env_int("REWIND_CHECKPOINT_TIMEOUT_S", 300, minimum=1)
REWIND_TAG_MAX_LENGTH = env_int("REWIND_TAG_MAX_LENGTH", 255, minimum=64)
# A ZVM whose clock is further than this from ours is shown and logged with a warning.
REWIND_CLOCK_SKEW_WARN_S = env_float("REWIND_CLOCK_SKEW_WARN_S", 30.0, minimum=1)
# A timed-out VPG checkpoint still listed within this long after its insert is recorded as
# listed late (a recovery may use it); the sweep looks this far back, every interval.
REWIND_LATE_LISTING_HORIZON_S = env_int("REWIND_LATE_LISTING_HORIZON_S", 86400, minimum=60)
REWIND_LATE_LISTING_INTERVAL_S = env_int("REWIND_LATE_LISTING_INTERVAL_S", 120, minimum=5)
# The retention forecast: how often each VPG's journal history is read to estimate when its
# tagged checkpoints leave the journal, and how long before that a warning is recorded (0: none).
REWIND_RETENTION_INTERVAL_S = env_int("REWIND_RETENTION_INTERVAL_S", 600, minimum=30)
# How often every upstream MCP server of the gateway is asked for its tools again.
REWIND_GATEWAY_REFRESH_INTERVAL_S = env_int("REWIND_GATEWAY_REFRESH_INTERVAL_S", 300, minimum=10)
# A tool an upstream lists for the first time is exported at once (true) or held until a person approves
# its definition (false); a changed definition is held either way (rewind.gateway.definitions).
REWIND_GATEWAY_TRUST_NEW_TOOLS = env_bool("REWIND_GATEWAY_TRUST_NEW_TOOLS", False)
REWIND_RETENTION_WARN_H = env_float("REWIND_RETENTION_WARN_H", 24.0, minimum=0)

# --- Recoveries --------------------------------------------------------------------------
REWIND_RECOVERY_EXPIRY_S = env_int("REWIND_RECOVERY_EXPIRY_S", 3600, minimum=60)
REWIND_RECOVERY_SECOND_APPROVER = env_bool("REWIND_RECOVERY_SECOND_APPROVER", False)
# --- Calls held for a person (rewind.approvals) ----------------------------------------------
# How long a held call waits for a person before it expires; how long the agent's call waits for the
# decision before it answers with the held call's id and page; two distinct approvers (four eyes).
REWIND_APPROVAL_EXPIRY_S = env_int("REWIND_APPROVAL_EXPIRY_S", 3600, minimum=60)
REWIND_APPROVAL_WAIT_S = env_int("REWIND_APPROVAL_WAIT_S", 240, minimum=0)
REWIND_APPROVAL_SECOND_APPROVER = env_bool("REWIND_APPROVAL_SECOND_APPROVER", REWIND_RECOVERY_SECOND_APPROVER)
REWIND_FLR_TIME_LIMIT_S = env_int("REWIND_FLR_TIME_LIMIT_S", 1800, minimum=60)
REWIND_REAPER_INTERVAL_S = env_int("REWIND_REAPER_INTERVAL_S", 300, minimum=5)
REWIND_INLINE_MAX_BYTES = env_int("REWIND_INLINE_MAX_BYTES", 1024 * 1024, minimum=0)
# The largest file a recovery writes back into a guest (restore in place); larger ones are refused when asked.
REWIND_RESTORE_MAX_BYTES = env_int("REWIND_RESTORE_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
REWIND_STORAGE_DIR = Path(env_str("REWIND_STORAGE_DIR") or VAR_DIR / "recovered").resolve()
# A folder asked back with recursive=true: refused (saying the figures) above this many files,
# this many bytes in all, or this many folders browsed (each folder is one ZVM browse call).
REWIND_FOLDER_MAX_FILES = env_int("REWIND_FOLDER_MAX_FILES", 1000, minimum=1)
REWIND_FOLDER_MAX_BYTES = env_int("REWIND_FOLDER_MAX_BYTES", 512 * 1024 * 1024, minimum=1)
REWIND_FOLDER_MAX_FOLDERS = env_int("REWIND_FOLDER_MAX_FOLDERS", 200, minimum=1)
# Recovered files of finished requests are deleted by the reaper after this many days (0: kept forever).
REWIND_RECOVERED_RETENTION_DAYS = env_int("REWIND_RECOVERED_RETENTION_DAYS", 7, minimum=0)

# --- Mail: approvers are told about new recovery requests ----------------------------------
EMAIL_HOST = env_str("EMAIL_HOST") or ""
EMAIL_PORT = env_int("EMAIL_PORT", 587, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
EMAIL_TIMEOUT = 20  # a hung mail server must not hold a worker: the task retries later instead
if EMAIL_HOST:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
elif DEBUG:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
else:
    EMAIL_BACKEND = "recoveries.mailbackend.NoMailBackend"  # logs "no mail configured" at INFO
REWIND_MAIL_FROM = env_str("REWIND_MAIL_FROM") or "zerto-rewind@localhost"
DEFAULT_FROM_EMAIL = REWIND_MAIL_FROM
REWIND_APPROVER_EMAILS = env_list("REWIND_APPROVER_EMAILS", [])
for _address in REWIND_APPROVER_EMAILS:
    if _address.count("@") != 1 or any(c.isspace() or c in '<>,;"' for c in _address):
        raise ImproperlyConfigured(f"REWIND_APPROVER_EMAILS: {_address!r} is not a plain email address")

# --- Notifications (Apprise): docs/notifications.md -------------------------------------------
# URLs carry credentials: secrets (NAME_FILE works), checked with Apprise here, never shown whole.
REWIND_NOTIFY_URLS = notify_urls_setting("REWIND_NOTIFY_URLS")
REWIND_NOTIFY_SITE_URLS = site_notify_urls_setting("REWIND_NOTIFY_SITE_URLS")
# A pending recovery is announced again this many minutes before it expires (0: not at all).
REWIND_NOTIFY_EXPIRY_WARN_MIN = env_int("REWIND_NOTIFY_EXPIRY_WARN_MIN", 10, minimum=0)
# A site whose ZVM has not answered (its circuit open) for this many minutes is announced, once per outage.
REWIND_NOTIFY_SITE_DOWN_MIN = env_int("REWIND_NOTIFY_SITE_DOWN_MIN", 10, minimum=1)

# --- MCP -----------------------------------------------------------------------------------
MCP_TOKEN_CACHE_S = env_float("MCP_TOKEN_CACHE_S", 10.0, minimum=0)
# At most this many calls per agent in any 60 s (a sliding window, not a refilling bucket).
MCP_RATE_LIMIT_PER_MINUTE = env_int("MCP_RATE_LIMIT_PER_MINUTE", 600, minimum=1)
# Unset: an agent may spend its minute's calls at once. Set: calls are also paced at the
# minute's rate, with at most this many at once above it (rewind/mcp/ratelimit.py).
MCP_RATE_LIMIT_BURST = env_int("MCP_RATE_LIMIT_BURST", 0, minimum=1) or None
if MCP_RATE_LIMIT_BURST is not None and MCP_RATE_LIMIT_BURST > MCP_RATE_LIMIT_PER_MINUTE:
    raise ImproperlyConfigured(
        f"MCP_RATE_LIMIT_BURST ({MCP_RATE_LIMIT_BURST}) must be at most MCP_RATE_LIMIT_PER_MINUTE "
        f"({MCP_RATE_LIMIT_PER_MINUTE}): no burst can exceed the minute's calls"
    )
# Counted in Redis for every worker and replica when there is one, else in the database.
MCP_RATE_LIMIT_REDIS_URL = _redis_url or None
MCP_MAX_BODY_BYTES = env_int("MCP_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
# Seals 2026-07-28 multi-round request state; must be the same on every worker and replica.
MCP_REQUEST_STATE_KEY = env_secret("MCP_REQUEST_STATE_KEY") or SECRET_KEY

# --- OAuth sign-in for agents (rewind.oauth): docs/oauth.md -------------------------------------
# Dynamic Client Registration (RFC 7591) and Client ID Metadata Documents: how a host registers.
REWIND_OAUTH_DCR = env_bool("REWIND_OAUTH_DCR", True)
REWIND_OAUTH_CIMD = env_bool("REWIND_OAUTH_CIMD", True)
# Networks a metadata document may be fetched from although they are not public (none by default).
REWIND_OAUTH_CIMD_ALLOWED_NETWORKS = env_networks("REWIND_OAUTH_CIMD_ALLOWED_NETWORKS")
OAUTH2_PROVIDER = oauth2_provider_settings(
    public_url=REWIND_PUBLIC_URL if REWIND_PUBLIC_URL_CONFIGURED else None,
    dcr=REWIND_OAUTH_DCR,
    cimd=REWIND_OAUTH_CIMD,
    cimd_timeout_s=env_float("REWIND_OAUTH_CIMD_TIMEOUT_S", 5.0, minimum=0.1, maximum=30),
    access_token_s=env_int("REWIND_OAUTH_ACCESS_TOKEN_S", 3600, minimum=60),
    refresh_token_s=env_int("REWIND_OAUTH_REFRESH_TOKEN_DAYS", 30, minimum=1) * 86400,
)
# Named for Django's migrations (the toolkit's models are swappable); ours point at its own.
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
# The consent page sends a person who is not signed in to the admin's sign-in.
LOGIN_URL = "admin:login"

# --- Audit anchors: the chain's head published outside the database (rewind/audit/anchors.py) ---------
# An append-only file, and syslog when set ("/dev/log", "udp://host:514", "tcp://host:601").
REWIND_AUDIT_ANCHOR_FILE = Path(env_str("REWIND_AUDIT_ANCHOR_FILE") or VAR_DIR / "audit-anchors.jsonl").resolve()
REWIND_AUDIT_ANCHOR_SYSLOG = env_str("REWIND_AUDIT_ANCHOR_SYSLOG")
# The beat publishes every chain that moved this often (and each process as it stops, and audit_verify);
# audit_verify fails on events older than the interval plus the grace that no anchor covers.
REWIND_AUDIT_ANCHOR_INTERVAL_S = env_int("REWIND_AUDIT_ANCHOR_INTERVAL_S", 60, minimum=10)
REWIND_AUDIT_ANCHOR_GRACE_S = env_int("REWIND_AUDIT_ANCHOR_GRACE_S", 60, minimum=0)
# Events are chained just after they commit (rewind.audit.chain_pending), and by the beat every
# REWIND_AUDIT_CHAIN_INTERVAL_S for a writer that died in between; manage.py audit_verify reports
# an event still not chained REWIND_AUDIT_CHAIN_LAG_S after it was recorded.
REWIND_AUDIT_CHAIN_INTERVAL_S = env_float("REWIND_AUDIT_CHAIN_INTERVAL_S", 30.0, minimum=1)
REWIND_AUDIT_CHAIN_LAG_S = env_float("REWIND_AUDIT_CHAIN_LAG_S", 120.0, minimum=1)

# --- Metrics (/metrics, rewind.metrics) ---------------------------------------------------
# A scraper sends "Authorization: Bearer <token>" and/or comes from one of these networks; with
# both set it needs both, with neither nobody gets the metrics.
REWIND_METRICS_TOKEN = env_secret("REWIND_METRICS_TOKEN")
REWIND_METRICS_ALLOWED_NETWORKS = env_networks("REWIND_METRICS_ALLOWED_NETWORKS")

# --- Logging ---------------------------------------------------------------------------------
_log_level = (env_str("REWIND_LOG_LEVEL") or "INFO").upper()
if _log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
    raise ImproperlyConfigured(f"REWIND_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {_log_level!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "rewind": {"level": _log_level},
        "catalog": {"level": _log_level},
        "recoveries": {"level": _log_level},
        # Apprise's debug and trace output holds notification URLs; its warnings say what failed.
        "apprise": {"level": "WARNING"},
    },
}
