"""Settings, all read from the environment (django-environ).

The embedded default (no environment at all) is SQLite (database and Celery broker) and kubesim:
what `make run` uses. Production sets DATABASE_URL, CELERY_BROKER_URL, KUBECONFIG, SECRET_KEY.
"""

import ipaddress
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def csp_origin(url: str) -> str:
    """scheme://host[:port] of a URL, as a Content-Security-Policy source."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def require_http_urls(name: str, *urls: str) -> None:
    """Stop the start when a URL the portal calls or sends people to is not http(s) (a file://
    or ftp:// URL would have it read a local file or speak another protocol)."""
    for url in urls:
        if url and urlsplit(url).scheme not in ("http", "https"):
            raise ImproperlyConfigured(f"{name} must be an http:// or https:// URL, not {url!r}.")


env = environ.Env()
env.read_env(BASE_DIR / ".env", overwrite=False)

# Local state of the embedded default: SQLite file, broker folders, kubesim files.
VAR_DIR = Path(env.str("QM_VAR_DIR", default=str(BASE_DIR / "var")))

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set the SECRET_KEY environment variable to a long random "
            "string (for example: python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set DEBUG=true for local development."
        )
    SECRET_KEY = "insecure-development-key-only-used-with-debug"

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "core",
    "fleet",
    "queues",
    "billing",
    "planning",
    "sso",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # A view that fails because the database does not answer gets a 503 with Retry-After.
    "core.outage.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    "core.metrics.RequestMetricsMiddleware",
    # Last, as django-axes asks: it answers for a locked-out client.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    # Refuses locked-out clients before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# Single sign-on with OpenID Connect: on when OIDC_ISSUER is set (sso/oidc.py). The group
# claim is mapped to memberships and roles at each sign-in by OIDC_ROLE_MAP, e.g.
# {"gpu-vision-leads": "team:vision:lead", "research-managers": "manager:research",
#  "finance": "finance", "platform": "platform-admin"}.
OIDC_ISSUER = env.str("OIDC_ISSUER", default="")
OIDC_RP_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
OIDC_RP_SCOPES = env.str("OIDC_SCOPES", default="openid email profile groups")
OIDC_RP_SIGN_ALGO = env.str("OIDC_SIGN_ALGO", default="RS256")
OIDC_GROUP_CLAIM = env.str("OIDC_GROUP_CLAIM", default="groups")
OIDC_ROLE_MAP = env.json("OIDC_ROLE_MAP", default={})
OIDC_PROVIDER_NAME = env.str("OIDC_PROVIDER_NAME", default="single sign-on")
# An identity's first sign-in may land in the existing account whose e-mail the provider says it
# verified (email_verified); off, every new identity gets a new account (sso/identity.py).
OIDC_LINK_VERIFIED_EMAIL = env.bool("OIDC_LINK_VERIFIED_EMAIL", default=False)
OIDC_STORE_ID_TOKEN = True  # signing out at the provider names the session that ends
OIDC_USE_PKCE = True
if OIDC_ISSUER:
    AUTHENTICATION_BACKENDS.append("sso.oidc.PortalOIDCBackend")
# Off: people sign in only through the identity provider (API tokens still work for scripts).
LOCAL_PASSWORDS = env.bool("LOCAL_PASSWORDS", default=True)
if not LOCAL_PASSWORDS:
    AUTHENTICATION_BACKENDS.remove("django.contrib.auth.backends.ModelBackend")

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        # Django's, with pages that render a lone surrogate as U+FFFD (core/text.py).
        "BACKEND": "core.templates.PortalTemplates",
        "NAME": "django",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "queues.context_processors.roles",
                "sso.oidc.sso_context",
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

VAR_DIR.mkdir(parents=True, exist_ok=True)

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'quartermaster.sqlite3'}")
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server, the worker and beat share one SQLite file in the embedded default.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# Keep connections open between requests: opening one costs PostgreSQL a process fork.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Parameters bound by the server, and a query run five times on a connection prepared:
    # PostgreSQL then plans it once, not per request (planning a job page's joins cost more
    # than running them, bench.reads_at_scale). Behind a pooler that cannot keep prepared
    # statements, add ?server_side_binding=false to DATABASE_URL.
    _db_options = DATABASES["default"].setdefault("OPTIONS", {})
    _db_options.setdefault("server_side_binding", True)
    if _db_options["server_side_binding"] is True:
        _db_options.setdefault("prepare_threshold", 5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Sign-in protection (django-axes): failures are counted per username and client address in
# the database, so every web worker sees them. The client address is the socket's unless the
# portal runs behind TRUSTED_PROXY_COUNT reverse proxies (then X-Forwarded-For is read, and only
# the part those proxies wrote).
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "core.auth.client_ip"
AXES_LOCKOUT_CALLABLE = "core.auth.lockout_response"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

# API tokens expire (days; 0: never) and a user holds a bounded number of active ones.
API_TOKEN_DAYS = env.int("API_TOKEN_DAYS", default=90)
API_TOKENS_PER_USER = env.int("API_TOKENS_PER_USER", default=10)

CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}
# Threads per web server process that run the views (config/asgi_handler.py); followed logs
# stream without one.
WEB_THREADS = env.int("WEB_THREADS", default=4)
# How long who a user is (groups, visible teams, roles) is kept in a shared cache between
# requests; any change to them ends it sooner (core/principal.py). 0: read it every request.
PRINCIPAL_CACHE_SECONDS = env.int("PRINCIPAL_CACHE_SECONDS", default=300)
# How many what-if replays run at once (today's configuration and the proposal, per cluster),
# each in a process of its own; 0: one per core the worker may use, 1: one after the other.
WHATIF_PROCESSES = env.int("WHATIF_PROCESSES", default=0)

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The image collects static files outside var/ (a writable volume in a cluster).
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "static")))
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="quartermaster@localhost")
# Where people reach the portal (links in e-mails): by default where `scripts/serve web` binds.
_web_host, _, _web_port = env.str("WEB_BIND", default="127.0.0.1:8000").rpartition(":")
if _web_host in ("", "0.0.0.0", "[::]"):
    _web_host = "localhost"
PORTAL_URL = env.str("PORTAL_URL", default=f"http://{_web_host}:{_web_port}")

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
# HTTPS: on by default without DEBUG. The demo (`make run`) serves plain HTTP on 127.0.0.1 and
# turns it off with SECURE_HTTPS=false; behind a TLS-terminating proxy, name the header it sets
# (SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO) so redirects and secure cookies work.
SECURE_HTTPS = env.bool("SECURE_HTTPS", default=not DEBUG)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_HTTPS
SECURE_SSL_REDIRECT = SECURE_HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^livez$", r"^readyz$", r"^metrics$"]  # probes, scrapers
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000 if SECURE_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
_proxy_ssl_header = env.str("SECURE_PROXY_SSL_HEADER", default="")
if _proxy_ssl_header:
    SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header, "https")

# Content-Security-Policy (django-csp): everything from the portal itself, no inline script.
# The API docs page (Swagger UI) starts itself with an inline script; it alone gets a nonce.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        "base-uri": ["'self'"],
        "object-src": ["'none'"],
    }
}
if OIDC_ISSUER:
    # Signing out posts a form that ends at the identity provider (its end-session endpoint).
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(csp_origin(OIDC_ISSUER))

# The API schema and its docs page are for signed-in users unless made public.
API_SCHEMA_PUBLIC = env.bool("API_SCHEMA_PUBLIC", default=False)
# A bearer token that /metrics asks for (empty: open, for a scraper on a private network).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# Where Celery workers and beat serve their /metrics (0: not served; web serves its own).
METRICS_PORT = env.int("METRICS_PORT", default=0)

DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=256 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "queues.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    # JSON that refuses, and renders safely, text no database or page can hold (core/text.py).
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "core.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "core.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "core.negotiation.Negotiation",
    "DEFAULT_THROTTLE_RATES": {"anon": env.str("API_ANON_THROTTLE", default="120/min")},
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Quartermaster API",
    "DESCRIPTION": "GPU quota, jobs and billing for a shared Kubernetes fleet.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_PERMISSIONS": ["core.schema.SchemaPermission"],
    # Several models have a field named "state" with choices of their own.
    "ENUM_NAME_OVERRIDES": {
        "JobState": "queues.models.Job.State",
        "JobKind": "queues.models.Job.Kind",
        "QuotaRequestState": "queues.models.QuotaRequest.State",
        "MonthlyReportState": "billing.models.MonthlyReport.State",
        "SecretKind": "queues.models.TeamSecret.Kind",
        "BudgetKind": "billing.models.Budget.Kind",
        "ReservationState": "queues.models.Reservation.State",
    },
}

# Celery. The embedded default is a SQLite file in var/ (config/broker.py): a real broker that
# needs no server, so `make run` has an asynchronous worker without Redis. Production uses Redis.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=f"sqlite:///{VAR_DIR / 'broker.sqlite3'}")
CELERY_BROKER_TRANSPORT_OPTIONS = {}
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_PREFETCH_MULTIPLIER = 4
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="quartermaster")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A request that sends a message while the broker is down waits about two seconds, then the
# message is kept in the database and sent later (core.worker.PortalTask).
CELERY_BROKER_CONNECTION_TIMEOUT = 2.0
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
}  # fmt: skip
# Celery's Django fixup closes the database connection around every task unless this is set,
# so each task would pay for a new PostgreSQL connection (a backend process fork). With it, the
# worker keeps connections like the web server does; config/celery.py closes broken or aged
# ones after each task, as Django does after each request.
CELERY_DB_REUSE_MAX = 1000
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Kubernetes and metrics.
KUBECONFIG = env.str("KUBECONFIG", default=str(VAR_DIR / "kubesim" / "kubeconfig"))
KUBE_CONTEXT = env.str("KUBE_CONTEXT", default="")
# The name `manage.py register_cluster` gives the cluster KUBECONFIG reaches (else the context's).
KUBE_CLUSTER_NAME = env.str("KUBE_CLUSTER_NAME", default="")
KUBE_QPS = env.float("KUBE_QPS", default=50.0)
KUBE_BURST = env.int("KUBE_BURST", default=100)
KUBE_MAX_ATTEMPTS = env.int("KUBE_MAX_ATTEMPTS", default=5)
# Namespaces no team may have, besides the cluster's, the schedulers' and the portal's own
# (queues.models.tenancy.SYSTEM_NAMESPACES and any kube-*).
TEAM_NAMESPACES_RESERVED = env.list("TEAM_NAMESPACES_RESERVED", default=[])
# The Pod Security Standards version the teams' namespaces enforce (baseline), pinned so that a
# cluster upgrade does not change it unannounced; warnings and audit follow the newest.
POD_SECURITY_VERSION = env.str("POD_SECURITY_VERSION", default="v1.33")
# Where the portal's processes register the requests they have in flight to each cluster, so
# that one worker at most waits on a cluster that stopped answering (fleet/kube/inflight.py):
# the broker's Redis by default; without Redis, a file under VAR_DIR (one host).
KUBE_INFLIGHT_URL = env.str("KUBE_INFLIGHT_URL", default="") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis", "rediss")) else ""
)
# Where the processes share each cluster's KUBE_QPS (fleet/kube/ratelimit.py): a storage URL of
# the `limits` library, the same Redis by default; none: each process limits its own requests.
KUBE_RATE_LIMIT_URL = env.str("KUBE_RATE_LIMIT_URL", default="") or KUBE_INFLIGHT_URL
# ClusterRole -> the portal's ServiceAccounts ("namespace/name") that hold it in every team
# namespace, bound there by the reconcile (queues/manifests/access.py): how the chart's web and
# workers reach team Secrets, and nothing outside those namespaces. JSON; empty: none.
KUBE_TEAM_NAMESPACE_ROLES = env.json("KUBE_TEAM_NAMESPACE_ROLES", default={})
if not isinstance(KUBE_TEAM_NAMESPACE_ROLES, dict) or not all(
    isinstance(accounts, list) and all(isinstance(a, str) and a.count("/") == 1 for a in accounts)
    for accounts in KUBE_TEAM_NAMESPACE_ROLES.values()
):
    raise ImproperlyConfigured(
        'KUBE_TEAM_NAMESPACE_ROLES: a JSON object, {"<ClusterRole>": ["<namespace>/<account>"]}.'
    )
# The half-life of the decayed GPU-hours a team page shows beside its fair-sharing weight.
FAIR_SHARE_HALF_LIFE_HOURS = env.float("FAIR_SHARE_HALF_LIFE_HOURS", default=168.0)
if not 0 < FAIR_SHARE_HALF_LIFE_HOURS < float("inf"):
    raise ImproperlyConfigured("FAIR_SHARE_HALF_LIFE_HOURS must be a positive number of hours.")
# Lines of a pod's log kept when it ends (readable after the pod is gone).
JOB_LOG_KEEP_LINES = env.int("JOB_LOG_KEEP_LINES", default=2000)
# Followed pod logs (`logs/?follow=1`) open at once, per person and in all, and how long one may
# last; past a cap a new follow is answered 429 (queues/services/log_streams.py).
LOG_FOLLOWS_PER_USER = env.int("LOG_FOLLOWS_PER_USER", default=8)
LOG_FOLLOWS_TOTAL = env.int("LOG_FOLLOWS_TOTAL", default=100)
LOG_FOLLOW_MAX_SECONDS = env.int("LOG_FOLLOW_MAX_SECONDS", default=3600)
# How long a request to apply a cluster's jobs waits before the worker reads them, so that the
# jobs submitted meanwhile are applied in the same batch (one claim, one recording transaction).
JOBS_APPLY_GATHER_SECONDS = env.float("JOBS_APPLY_GATHER_SECONDS", default=0.1)
# Where the teams' pods may connect besides DNS and their own namespace, rendered into each team
# namespace's egress NetworkPolicy, with the clouds' instance metadata services (AWS, GCP, Azure,
# OpenStack; AWS's IPv6 one) carved out: a pod that reaches one can read the node's credentials.
TEAM_EGRESS_CIDRS = env.list("TEAM_EGRESS_CIDRS", default=["0.0.0.0/0"])
CLOUD_METADATA_ADDRESSES = ["169.254.169.254/32", "fd00:ec2::254/128"]
for _cidr in TEAM_EGRESS_CIDRS:
    try:
        _network = ipaddress.ip_network(_cidr)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"TEAM_EGRESS_CIDRS: {_cidr!r}: {_exc}.") from None
    for _metadata in map(ipaddress.ip_network, CLOUD_METADATA_ADDRESSES):
        if _network.version == _metadata.version and _network.subnet_of(_metadata):
            raise ImproperlyConfigured(
                f"TEAM_EGRESS_CIDRS: {_cidr} is a cloud metadata address, which teams never reach."
            )
PROMETHEUS_URL = env.str("PROMETHEUS_URL", default="")
# The embedded default scrapes kubesim's exporter, wherever `scripts/serve kubesim` listens.
KUBESIM_PORT = env.int("KUBESIM_PORT", default=6443)
# The demo's second cluster (Volcano), `scripts/serve kubesim-lab`: seed_demo registers it with
# its exporter on this port.
KUBESIM_LAB_PORT = env.int("KUBESIM_LAB_PORT", default=6444)
DCGM_SCRAPE_URLS = env.list(
    "DCGM_SCRAPE_URLS", default=[f"http://127.0.0.1:{KUBESIM_PORT}/metrics/dcgm"]
)
DCGM_SCRAPE_INTERVAL = env.int("DCGM_SCRAPE_INTERVAL", default=30)
DCGM_SCRAPE_TIMEOUT = env.float("DCGM_SCRAPE_TIMEOUT", default=10.0)
# With honor_labels (or honorLabels in a ServiceMonitor) Prometheus keeps the exporter's pod
# labels; without it they arrive as exported_pod / exported_namespace.
DCGM_HONOR_LABELS = env.bool("DCGM_HONOR_LABELS", default=True)
PROMETHEUS_TIMEOUT = env.float("PROMETHEUS_TIMEOUT", default=120.0)
# "auto": Prometheus when PROMETHEUS_URL is set, else direct scrape; or "prometheus" / "scrape".
BILLING_SOURCE = env.str("BILLING_SOURCE", default="auto")
BILLING_MAX_QUERY_SAMPLES = env.int("BILLING_MAX_QUERY_SAMPLES", default=25_000_000)
BILLING_STUCK_ZERO_SECONDS = env.int("BILLING_STUCK_ZERO_SECONDS", default=600)
BILLING_BACKFILL_DAYS = env.int("BILLING_BACKFILL_DAYS", default=3)
# GPU faults (billing.services.gpufaults): XIDs that mean a GPU is bad (48 double-bit ECC, 63/64
# page retirement or row remapping events and failures, 74 NVLink, 79 fallen off the bus, 94/95
# contained/uncontained ECC errors), and the share of time throttled for heat or power above
# which a GPU is degraded (shown, not tainted).
GPU_FAULT_XIDS = env.list("GPU_FAULT_XIDS", cast=int, default=[48, 63, 64, 74, 79, 94, 95])
GPU_THROTTLE_DEGRADED_SHARE = env.float("GPU_THROTTLE_DEGRADED_SHARE", default=0.2)
require_http_urls("PROMETHEUS_URL", PROMETHEUS_URL)
require_http_urls("DCGM_SCRAPE_URLS", *DCGM_SCRAPE_URLS)
require_http_urls("OIDC_ISSUER", OIDC_ISSUER)
require_http_urls("PORTAL_URL", PORTAL_URL)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Every sign-in says how many failures it cleared; only lockouts are news.
        "axes": {"level": "WARNING"},
    },
}
