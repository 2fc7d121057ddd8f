"""Settings shared by every environment.

The environment is read here, once (CONTRACT §1). ``dev``, ``production`` and
``test`` import this module and adjust what differs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .backends import caches, channel_layers, database_config, replica_config
from .env import (
    env_bool,
    env_float,
    env_int,
    env_json,
    env_json_object,
    env_list,
    env_networks,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = BASE_DIR / "var"

SECRET_KEY = env_str("FORGE_SECRET_KEY")
DEBUG = env_bool("FORGE_DEBUG", False)
ALLOWED_HOSTS = env_list("FORGE_ALLOWED_HOSTS", [])

INSTALLED_APPS = [
    "daphne",
    "forge.admin_site.ForgeAdminConfig",  # django.contrib.admin, with Forge's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "sessions.apps.SessionsConfig",
    "memory",
    "forge",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A NUL anywhere in a request is a 400 before anything can send it to the database.
    "forge.nul.RefuseNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "forge.middleware.TenancyMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "forge.middleware.ContentSecurityPolicyMiddleware",
    "forge.middleware.PrivateResponsesMiddleware",
]
# Pages served with their own defaults instead of Forge's Content-Security-Policy.
# Where the Vercel AI SDK's chat routes live (useChat's default is /api/chat): the chat,
# {prefix}/{id}/stream, /stop and /messages. No leading or trailing slash.
FORGE_AI_SDK_PREFIX = env_str("FORGE_AI_SDK_PREFIX", "api/chat").strip("/")

FORGE_CSP_EXEMPT = ["/admin/", "/api/docs/"]

ROOT_URLCONF = "forge.urls"
ASGI_APPLICATION = "forge.asgi.application"
WSGI_APPLICATION = "forge.wsgi.application"

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

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"


# --- Database -----------------------------------------------------------------

DEFAULT_DATABASE_URL = f"sqlite:///{VAR_DIR / 'forge.sqlite3'}"


DATABASE_URL = env_str("DATABASE_URL", DEFAULT_DATABASE_URL)
# PostgreSQL only: the role serving processes act as (``SET ROLE``), one that owns
# no table and cannot bypass row-level security; "" keeps the connecting role.
# ``manage.py setup_app_role`` creates it. See README, "Tenancy in the database".
FORGE_DB_APP_ROLE = env_str("FORGE_DB_APP_ROLE", "")
if FORGE_DB_APP_ROLE and not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", FORGE_DB_APP_ROLE):
    raise ValueError(f"FORGE_DB_APP_ROLE must be a lower-case identifier: {FORGE_DB_APP_ROLE!r}")
DATABASES = {"default": database_config(DATABASE_URL)}
# A streaming replica for reads that tolerate lag (forge.db.routing; docs/deploy.md,
# "Reads on the replica"). Unset: one database, nothing routed.
DATABASE_REPLICA_URL = env_str("DATABASE_REPLICA_URL")
# Seconds a replica that failed a read is left out before it is tried again.
FORGE_REPLICA_RETRY_SECONDS = env_float("FORGE_REPLICA_RETRY_SECONDS", 5.0)


if DATABASE_REPLICA_URL:
    DATABASES["replica"] = replica_config(DATABASE_REPLICA_URL)
    DATABASE_ROUTERS = ["forge.db.routing.ReplicaRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


# --- Channel layer and cache --------------------------------------------------

# One Redis, or several separated by commas (shards): the channel layer spreads
# groups and channels over all of them (channels-redis hashes the name); the cache, the
# in-flight mirror and the throttles use the first (docs/deploy.md, "Redis shards").
REDIS_URLS = env_list("REDIS_URL", [])
REDIS_URL = REDIS_URLS[0] if REDIS_URLS else ""
# Names in Redis (channel layer, cache, in-flight buffer) start with this, so
# several deployments, or test runs, can share one Redis.
FORGE_REDIS_PREFIX = env_str("FORGE_REDIS_PREFIX", "forge")


# Which channels-redis layer carries frames between processes: "pubsub" (Redis
# PUBLISH/SUBSCRIBE: one command per frame, pushed to the processes subscribed
# to the group; nothing is stored) or "core" (per-channel sorted sets, a Lua
# script per group send and a blocking pop per receive). Frames are ephemeral and
# clients repair any loss from the log and snapshots, so pub/sub fits; see
# docs/benchmarks.md for the measurement behind the default.
FORGE_CHANNEL_LAYER = env_str("FORGE_CHANNEL_LAYER", "pubsub")
if FORGE_CHANNEL_LAYER not in ("pubsub", "core"):
    raise ValueError(f"FORGE_CHANNEL_LAYER must be 'pubsub' or 'core': {FORGE_CHANNEL_LAYER!r}")


CHANNEL_LAYERS = channel_layers(REDIS_URLS, prefix=FORGE_REDIS_PREFIX, layer=FORGE_CHANNEL_LAYER)
CACHES = caches(REDIS_URL, prefix=FORGE_REDIS_PREFIX)


# --- Internationalisation and static files ------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("FORGE_STATIC_ROOT") or VAR_DIR / "static")
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "forge.storage.ForgeStaticFilesStorage"},
}
MEDIA_ROOT = VAR_DIR / "media"
# Uploads and spilled tool outputs are a tenant's data: readable by the server's own
# user only, not by every local account (QA: 0644 files in 0755 folders).
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
MEDIA_URL = "media/"


# --- REST framework -------------------------------------------------------------

REST_FRAMEWORK = {
    # Token first: an unauthenticated request gets 401 with WWW-Authenticate: Token.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "forge.api.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "forge.api.errors.exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "user": env_str("FORGE_API_RATE", "3000/min"),
        "prompts": env_str("FORGE_PROMPT_RATE", "60/min"),
    },
    "DEFAULT_THROTTLE_CLASSES": ["forge.throttling.UserRateThrottle"],
}
# Prompts carry attachments (at most 10 files of 10 MB, base64 in JSON): allow the body.
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024 * 1024
# The largest body POST /api/sessions/import/ takes (an export file); a larger one is
# 413, refused by the server before it is read past this (forge.server_limits).
FORGE_MAX_IMPORT_BYTES = env_int("FORGE_MAX_IMPORT_BYTES", 64 * 1024 * 1024)
# Sockets and SSE streams one user may hold open at once, per server process.
FORGE_MAX_STREAMS_PER_USER = env_int("FORGE_MAX_STREAMS_PER_USER", 20)
# Seconds a stream may wait for the channel layer to let it join its session's group
# (an unresponsive Redis would keep it waiting for good); then 503 / close 4503.
FORGE_LAYER_TIMEOUT = env_float("FORGE_LAYER_TIMEOUT", 5.0)
# Seconds between heartbeat comments on an idle SSE stream.
FORGE_SSE_HEARTBEAT = env_float("FORGE_SSE_HEARTBEAT", 15.0)
# A stream whose live frames went quiet after some activity checks the log for
# events the channel layer lost, after this many seconds.
FORGE_STREAM_RESYNC_SECONDS = env_float("FORGE_STREAM_RESYNC_SECONDS", 2.0)
# Under daphne, a stream's sends wait while its client's write buffer is full; a client
# whose buffer does not drain for this many seconds is cut, and resumes from its last
# seq when it reconnects (forge.realtime.slow_clients). 0: never cut (sends still wait).
FORGE_STREAM_STALL_SECONDS = env_float("FORGE_STREAM_STALL_SECONDS", 30.0)
# An open socket or SSE stream checks this often that its caller may still watch (a
# token deleted, a user deactivated, logged out or gone from the tenant, the session
# deleted): then it ends (4401 / 4404, or an error frame).
FORGE_STREAM_RECHECK_SECONDS = env_float("FORGE_STREAM_RECHECK_SECONDS", 15.0)
SPECTACULAR_SETTINGS = {
    "TITLE": "Forge API",
    "DESCRIPTION": "Sessions as append-only event logs, with their message and part projections.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Every route's error statuses are in the schema (forge.api.schema).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "forge.api.schema.document_streams",
        "forge.api.schema.document_errors",
    ],
}


# --- Forge ----------------------------------------------------------------------

# Failed sign-ins per (name, address) before the login pages refuse that pair, and for
# how long (forge.login_guard).
FORGE_LOGIN_FAILURES = env_int("FORGE_LOGIN_FAILURES", 5)
FORGE_LOGIN_LOCKOUT_SECONDS = env_int("FORGE_LOGIN_LOCKOUT_SECONDS", 900)

FORGE_MODEL = env_str("FORGE_MODEL", "offline/echo")
FORGE_SMALL_MODEL = env_str("FORGE_SMALL_MODEL", FORGE_MODEL)
FORGE_SCRIPT = env_str("FORGE_SCRIPT")
FORGE_MAX_PROMPT_BYTES = env_int("FORGE_MAX_PROMPT_BYTES", 100_000)
# Modules imported at start-up that register tools (forge.tools.tool), hooks
# (forge.hooks) or providers (forge.providers.register); comma-separated.
FORGE_PLUGINS = env_list("FORGE_PLUGINS", [])
# offline/echo streams word by word with this pause (seconds) between words.
FORGE_ECHO_DELAY = env_float("FORGE_ECHO_DELAY", 0.03)

# The OpenAI provider (official SDK; any OpenAI-compatible server).
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or None
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
# Retries on 429, 5xx and dropped connections: at most this many attempts,
# all within this many seconds, with exponential backoff.
FORGE_PROVIDER_MAX_ATTEMPTS = env_int("FORGE_PROVIDER_MAX_ATTEMPTS", 4)
FORGE_PROVIDER_RETRY_WINDOW = env_float("FORGE_PROVIDER_RETRY_WINDOW", 30.0)
FORGE_PROVIDER_TIMEOUT = env_float("FORGE_PROVIDER_TIMEOUT", 120.0)

# Tools.
FORGE_TOOL_TIMEOUT = env_float("FORGE_TOOL_TIMEOUT", 30.0)
# A tool's output is logged whole up to this many bytes (UTF-8); a larger one is stored
# whole as a file of the session, and the tool part keeps a head of it and names the
# file part (forge.runtime.tool_output).
FORGE_TOOL_OUTPUT_MAX_BYTES = env_int("FORGE_TOOL_OUTPUT_MAX_BYTES", 10 * 1024 * 1024)
# MCP servers every agent has, as MCP clients write mcpServers (JSON):
# {"<name>": {"command", "args"?, "env"?}} or {"<name>": {"url", "headers"?}}.
# An agent's own (Agent.mcp_servers) replace those of the same name.
FORGE_MCP_SERVERS = env_json_object("FORGE_MCP_SERVERS")
# Seconds an MCP server has to start (spawn, initialize, list its tools; stopping it when
# it does not is included); after a failed start it is reported unavailable, without
# trying again, for FORGE_MCP_RETRY_SECONDS (docs/mcp.md).
FORGE_MCP_START_TIMEOUT = env_float("FORGE_MCP_START_TIMEOUT", 30.0)
FORGE_MCP_RETRY_SECONDS = env_float("FORGE_MCP_RETRY_SECONDS", 60.0)
FORGE_WORKSPACE_ROOT = Path(env_str("FORGE_WORKSPACE_ROOT") or VAR_DIR / "workspaces")

# Tool approvals (docs/approvals.md): the default rules, as JSON, that an agent's
# own ``tool_approval`` rules come before: {"<tool or glob>": "allow"|"ask"|"deny"},
# or a list of {"tool", "pointer"?, "pattern"?, "action"}. Unset: every tool allowed.
# A call waiting for an answer longer than FORGE_APPROVAL_TIMEOUT seconds is denied.
FORGE_TOOL_APPROVAL = env_json("FORGE_TOOL_APPROVAL", {})
FORGE_APPROVAL_TIMEOUT = env_float("FORGE_APPROVAL_TIMEOUT", 24 * 3600.0)

FORGE_INFLIGHT_PREFIX = FORGE_REDIS_PREFIX
# A reply's deltas are published in windows of this many milliseconds: one frame
# per streaming part and window, flushed at once at a part's end, before every
# write to the log, and on abort (forge.runtime.deltas). 0: a frame per delta.
FORGE_DELTA_WINDOW_MS = env_int("FORGE_DELTA_WINDOW_MS", 40)

# One runner per session: a lease in the database, renewed while the turn runs.
FORGE_LEASE_SECONDS = env_float("FORGE_LEASE_SECONDS", 15.0)
# What a running turn holds against a budget before its speaker or tenant has a finished
# reply this month (after one: their average reply). forge/usage/budgets.py.
FORGE_BUDGET_RESERVE_TOKENS = env_int("FORGE_BUDGET_RESERVE_TOKENS", 1000)
# Finalize turns a crashed process left open when the ASGI application starts,
# and, in every process that runs turns, whenever a lease expires.
FORGE_RECOVER_ON_START = env_bool("FORGE_RECOVER_ON_START", True)
FORGE_LEASE_JANITOR = env_bool("FORGE_LEASE_JANITOR", True)
# A serving process asked to stop (SIGTERM, Ctrl-C) lets its running turns finish for
# this many seconds, then ends the rest as aborted (forge/runtime/shutdown.py).
FORGE_SHUTDOWN_GRACE = env_float("FORGE_SHUTDOWN_GRACE", 10.0)

# Context windows and compaction (issue 9). A model's context limit, in tokens, by
# "provider/model" (an agent may override it); compaction starts when a step's
# reported usage, or an estimate of the request (characters / 4), reaches the
# limit minus the output reserve. FORGE_AUTO_COMPACT=0 turns automatic
# compaction off (an agent may override it): the reply then ends with a
# ContextOverflowError. The summary keeps the most recent turns verbatim, up to
# FORGE_COMPACT_TAIL_TOKENS; FORGE_SMALL_MODEL writes the summary.
FORGE_CONTEXT_LIMITS: dict[str, int] = {
    "openai/gpt-4o": 128_000,
    "openai/gpt-4o-mini": 128_000,
    "openai/gpt-4.1-mini": 1_047_576,
}
FORGE_CONTEXT_LIMIT_DEFAULT = env_int("FORGE_CONTEXT_LIMIT_DEFAULT", 128_000)
FORGE_OUTPUT_RESERVE = env_int("FORGE_OUTPUT_RESERVE", 8_192)
FORGE_AUTO_COMPACT = env_bool("FORGE_AUTO_COMPACT", True)
FORGE_COMPACT_TAIL_TOKENS = env_int("FORGE_COMPACT_TAIL_TOKENS", 4_000)
# Pruning: completed tool outputs older than the newest FORGE_PRUNE_PROTECT_TOKENS
# (and than the last two prompts) reach the model as a placeholder, once at least
# FORGE_PRUNE_MINIMUM_TOKENS would be saved. The log keeps every output.
FORGE_PRUNE_PROTECT_TOKENS = env_int("FORGE_PRUNE_PROTECT_TOKENS", 40_000)
FORGE_PRUNE_MINIMUM_TOKENS = env_int("FORGE_PRUNE_MINIMUM_TOKENS", 20_000)
# Incremental context (forge.context.incremental): a per-process LRU of each session's
# derived model input, folded forward from the events since; at most this many
# sessions (0: off, every step derives in full), this many messages in all, and this
# many bytes of estimated memory in all (FORGE_CONTEXT_CACHE_BYTES, default 64 MiB;
# 0 or less: no byte cap). The least recently used state goes first; a state over
# a cap by itself is served but not kept.
# FORGE_CONTEXT_VERIFY compares every cached result with the full derivation and
# raises on a difference (on in the test settings; it doubles the read cost).
FORGE_CONTEXT_CACHE_SIZE = env_int("FORGE_CONTEXT_CACHE_SIZE", 256)
FORGE_CONTEXT_CACHE_MESSAGES = env_int("FORGE_CONTEXT_CACHE_MESSAGES", 100_000)
FORGE_CONTEXT_CACHE_BYTES = env_int("FORGE_CONTEXT_CACHE_BYTES", 64 * 1024 * 1024)
FORGE_CONTEXT_VERIFY = env_bool("FORGE_CONTEXT_VERIFY", False)
# Context snapshots (forge.context.snapshot): the turn's last write stores the session's
# derived model input once FORGE_CONTEXT_SNAPSHOT_EVENTS events came since the last
# one; a process without the session cached loads it and folds only the events after.
# A cache, never trusted (checked against the log); off: every cold load derives in full.
FORGE_CONTEXT_SNAPSHOTS = env_bool("FORGE_CONTEXT_SNAPSHOTS", True)
FORGE_CONTEXT_SNAPSHOT_EVENTS = env_int("FORGE_CONTEXT_SNAPSHOT_EVENTS", 64)

# Price per million tokens, by "provider/model", for step and message cost.
FORGE_MODEL_PRICES: dict[str, dict[str, float]] = {
    # The offline model has a nominal price so cost shows up in development.
    "offline/echo": {"input": 0.10, "output": 0.40, "cache_read": 0.01},
    "openai/gpt-4o-mini": {"input": 0.15, "output": 0.60, "cache_read": 0.075},
    "openai/gpt-4o": {"input": 2.50, "output": 10.00, "cache_read": 1.25},
    "openai/gpt-4.1-mini": {"input": 0.40, "output": 1.60, "cache_read": 0.10},
}

# FORGE_LOG_FORMAT: "plain" (the default here) or "json" (one JSON object per line, with
# one line per turn end: forge/telemetry/logs.py; the default under production).
FORGE_LOG_FORMAT = env_str("FORGE_LOG_FORMAT", "plain")
if FORGE_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"FORGE_LOG_FORMAT: plain or json, not {FORGE_LOG_FORMAT!r}")
# The prompt's text in the turn-end line: only when asked.
FORGE_LOG_PROMPTS = env_bool("FORGE_LOG_PROMPTS", False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "forge.telemetry.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": FORGE_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"forge": {"level": "INFO"}, "sessions": {"level": "INFO"}},
}


# --- Long-term memory (the memory app) -----------------------------------------------
# Read by memory/ when used (memory imports nothing of forge). See docs/memory.md.

# Dotted path of the MessageSummarizer: a callable ``(messages) -> str`` where messages
# are ``[{role, text, at}]``. The default asks FORGE_SMALL_MODEL; for an offline model it
# is memory.summarizers.extractive (the sentences that carry facts), with no model asked.
FORGE_MEMORY_SUMMARIZER = env_str(
    "FORGE_MEMORY_SUMMARIZER", "forge.runtime.small_model.summarize_dialogue"
)
# Seconds a summarizer may take for one core before the core is skipped (0: no limit).
FORGE_MEMORY_SUMMARIZER_TIMEOUT = env_float("FORGE_MEMORY_SUMMARIZER_TIMEOUT", 120.0)
# DialogRolling: roll a core whose dialogue window holds this many messages, keeping the
# most recent FORGE_MEMORY_ROLL_KEEP in the window; roll everything (and start a new
# memory session) after FORGE_MEMORY_IDLE_AFTER seconds without interaction.
FORGE_MEMORY_ROLL_THRESHOLD = env_int("FORGE_MEMORY_ROLL_THRESHOLD", 40)
FORGE_MEMORY_ROLL_KEEP = env_int("FORGE_MEMORY_ROLL_KEEP", 8)
FORGE_MEMORY_IDLE_AFTER = env_float("FORGE_MEMORY_IDLE_AFTER", 1800.0)
# MessageCompressor: tool output longer than this is cut before summarizing.
FORGE_MEMORY_TOOL_OUTPUT_CHARS = env_int("FORGE_MEMORY_TOOL_OUTPUT_CHARS", 2000)
# The dialog_history context block: at most this many recent slices and characters.
FORGE_MEMORY_HISTORY_SLICES = env_int("FORGE_MEMORY_HISTORY_SLICES", 8)
FORGE_MEMORY_HISTORY_CHARS = env_int("FORGE_MEMORY_HISTORY_CHARS", 4000)
# Memory search (docs/memory.md, "Search"): full text on both engines, plus dense vectors
# when FORGE_MEMORY_VECTORS is on (off: full text only, nothing embedded). A slice found
# by meaning alone needs a cosine above FORGE_MEMORY_DENSE_MIN_SIMILARITY. Each process
# keeps the vectors of the cores it searched, up to FORGE_MEMORY_VECTOR_CACHE_MB, and
# their full-text postings, up to FORGE_MEMORY_TERMS_CACHE_MB.
FORGE_MEMORY_VECTORS = env_bool("FORGE_MEMORY_VECTORS", True)
FORGE_MEMORY_DENSE_MIN_SIMILARITY = env_float("FORGE_MEMORY_DENSE_MIN_SIMILARITY", 0.0)
FORGE_MEMORY_DENSE_WEIGHT = env_float("FORGE_MEMORY_DENSE_WEIGHT", 0.3)
FORGE_MEMORY_PASSAGE_WEIGHT = env_float("FORGE_MEMORY_PASSAGE_WEIGHT", 0.4)
# English query words also match their nearest words in the offline model, at this share
# of their idf times the cosine (memory.search.expansion; 0: no expansion).
FORGE_MEMORY_EXPANSION_WEIGHT = env_float("FORGE_MEMORY_EXPANSION_WEIGHT", 0.5)
FORGE_MEMORY_VECTOR_CACHE_MB = env_int("FORGE_MEMORY_VECTOR_CACHE_MB", 1024)
FORGE_MEMORY_TERMS_CACHE_MB = env_int("FORGE_MEMORY_TERMS_CACHE_MB", 256)
# Dense vectors for memory search (memory/embeddings, docs/memory.md "Embeddings"):
# FORGE_EMBEDDING_MODEL "openai/<model>": that model's /v1/embeddings at OPENAI_BASE_URL
# (with OPENAI_API_KEY); unset: the offline model shipped in the wordllama wheel
# ("wordllama/l2_supercat_256"). FORGE_MEMORY_EMBEDDER (a dotted path to a
# zero-argument factory returning an Embedder) overrides both.
FORGE_EMBEDDING_MODEL = env_str("FORGE_EMBEDDING_MODEL")
FORGE_MEMORY_EMBEDDER = env_str("FORGE_MEMORY_EMBEDDER")
# The OpenAI-compatible embedder: seconds per request (one attempt, no retry: a search
# waits this long at most, then falls back to full text); vector dimensions to ask
# for (sent as "dimensions"; 0: the model's own, learned from its first answer);
# texts per request.
FORGE_EMBEDDING_TIMEOUT = env_float("FORGE_EMBEDDING_TIMEOUT", 5.0)
FORGE_EMBEDDING_DIMENSIONS = env_int("FORGE_EMBEDDING_DIMENSIONS", 0)
FORGE_EMBEDDING_BATCH = env_int("FORGE_EMBEDDING_BATCH", 64)
_loggers: Any = LOGGING["loggers"]
_loggers["memory"] = {"level": "INFO"}

# Prometheus metrics at /metrics (forge/telemetry): served to a request carrying
# "Authorization: Bearer <FORGE_METRICS_TOKEN>" or coming from an address in
# FORGE_METRICS_ALLOW (addresses or networks); with neither set, to nobody.
FORGE_METRICS_TOKEN = env_str("FORGE_METRICS_TOKEN")
FORGE_METRICS_ALLOW = env_networks("FORGE_METRICS_ALLOW")
# OpenTelemetry traces (forge/telemetry/tracing.py): on when an OTLP endpoint is set (the
# SDK's own OTEL_EXPORTER_OTLP_* variables configure the exporter) or FORGE_OTEL is;
# prompts and completions go into spans only with FORGE_OTEL_CAPTURE_CONTENT.
FORGE_OTEL = env_bool(
    "FORGE_OTEL",
    bool(env_str("OTEL_EXPORTER_OTLP_ENDPOINT") or env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
)
FORGE_OTEL_CAPTURE_CONTENT = env_bool("FORGE_OTEL_CAPTURE_CONTENT", False)
