"""Settings read from the environment, validated before anything touches the database.

The one module of the product that reads the environment for settings (test_architecture.py
says which few others read it, and why): `Settings.from_env` reads it once, at the edge (the
CLI's parser, a code location when it loads), and everything else is given the settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict, timeout_from_conninfo


class ConfigError(ValueError):
    """A setting is malformed; the message names the variable and what is expected."""


ENV_HOME = "INVOICE_PIPELINE_HOME"
ENV_DATABASE_URL = "INVOICE_PIPELINE_DATABASE_URL"
ENV_PG_PORT = "INVOICE_PIPELINE_PG_PORT"
ENV_PG_LISTEN = "INVOICE_PIPELINE_PG_LISTEN"
ENV_DATABASE_NAME = "INVOICE_PIPELINE_DATABASE_NAME"
ENV_LOCK_TTL = "INVOICE_PIPELINE_LOCK_TTL_SECONDS"
ENV_HEARTBEAT = "INVOICE_PIPELINE_HEARTBEAT_SECONDS"
ENV_MAX_ATTEMPTS = "INVOICE_PIPELINE_MAX_ATTEMPTS"
ENV_RETRY_BASE = "INVOICE_PIPELINE_RETRY_BASE_SECONDS"
ENV_MAX_DOCUMENT_BYTES = "INVOICE_PIPELINE_MAX_DOCUMENT_BYTES"
ENV_BATCH_SIZE = "INVOICE_PIPELINE_BATCH_SIZE"
ENV_SAVE_AFTER_MS = "INVOICE_PIPELINE_SAVE_AFTER_MS"
ENV_INBOX = "INVOICE_PIPELINE_INBOX"
ENV_REQUEST_TIMEOUT = "INVOICE_PIPELINE_REQUEST_TIMEOUT_SECONDS"
ENV_DAGSTER_DATABASE_NAME = "INVOICE_PIPELINE_DAGSTER_DATABASE_NAME"
# Dagster's own: the instance folder (its dagster.yaml), default <home>/dagster_home.
ENV_DAGSTER_HOME = "DAGSTER_HOME"
# The review page's --proxy-header (review_ui/cli.py): the header a trusted proxy names the reviewer in.
ENV_REVIEW_PROXY_HEADER = "INVOICE_PIPELINE_REVIEW_PROXY_HEADER"
ENV_CELERY_MAX_RUN = "INVOICE_PIPELINE_CELERY_MAX_RUN_SECONDS"
ENV_CELERY_BROKER_HEARTBEAT = "INVOICE_PIPELINE_CELERY_BROKER_HEARTBEAT_SECONDS"
# 1: the code location has the Launchpad review jobs (review_invoice, correct_invoice,
# requeue_invoices); 0 leaves them out. Dagster's open-source webserver has no login, so a
# Launchpad approval names whoever typed a name, for any org: a production deployment sets 0 and
# approvals go through the review page behind authentication (docs/scale-out.md).
ENV_REVIEW_JOBS = "INVOICE_PIPELINE_REVIEW_JOBS"
# The review page's users file (review_ui/auth.py's format). Launchpad review runs act only in a
# local deployment (nothing vouches for a name typed into a webserver with no login); there, when
# set, a run's reviewer must be listed in it and acts only for that entry's orgs
# (orchestration/review_jobs.py).
ENV_REVIEW_USERS = "INVOICE_PIPELINE_REVIEW_USERS"
# Which deployment's resources a code location binds (orchestration/resources/deployments.py):
# "local" (the default: runs with no setup) or "production".
ENV_DEPLOYMENT = "INVOICE_PIPELINE_DEPLOYMENT"
# 1 (the default): every structured e-invoice is checked against the EN 16931 / Factur-X rules it
# declares, and a Factur-X PDF's page against its XML (issue 55; DocumentReader). 0 turns both off:
# for measuring what they cost (benchmarks/default_path.py), never a deployment's choice.
ENV_EINVOICE_CHECKS = "INVOICE_PIPELINE_EINVOICE_CHECKS"

DEFAULT_PG_PORT = 54329
DEFAULT_PG_LISTEN = "127.0.0.1"
DEFAULT_DATABASE_NAME = "invoice_pipeline"
# The one place for defaults: Settings (the CLI) and the Dagster resource both read these.
# A dead holder's lock is swept this long after its last heartbeat; the heartbeat interval, when
# not given, is a third of it (a live holder then misses two beats before it could be swept).
DEFAULT_LOCK_TTL_SECONDS = 30
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_RETRY_BASE_SECONDS = 30
DEFAULT_MAX_DOCUMENT_BYTES = 20 * 1024 * 1024
# The one setting that shapes runs (runs.RunShape): the most invoices one run takes.
DEFAULT_BATCH_SIZE = 500
# Finished results of a chunk wait at most this much work before they are saved: what a crash
# can lose (stages.saved_as_they_finish). 0 saves each document as soon as it is read.
DEFAULT_SAVE_AFTER_MS = 1000
DEFAULT_REQUEST_TIMEOUT_SECONDS = 3600
# The celery location's runs (docs/scale-out.md): a task the broker lost would leave its run
# waiting for ever, holding its invoices' requests. Past this, Dagster's run monitoring fails it.
DEFAULT_CELERY_MAX_RUN_SECONDS = 3600
# RabbitMQ requeues a delivery not yet acknowledged once the consumer's connection is dead;
# heartbeats make a silently cut connection dead in two to three intervals (with 4 s: 6-12 s
# measured in the namespace cluster), instead of TCP's minutes. But a worker whose step blocks
# its event loop (the solo pool) sends no heartbeat while the step runs: a step longer than about
# two intervals gets its connection closed and its task requeued to another worker (harmless,
# the claim makes the copy claim nothing, but run twice). So the default is celery's own, 120 s,
# fit for chunks of minutes; a short interval is for short steps or the prefork pool (its main
# process keeps heartbeating while a child runs the step). The redis transport has no heartbeats.
DEFAULT_CELERY_BROKER_HEARTBEAT_SECONDS = 120


def default_heartbeat_seconds(ttl_seconds: float) -> float:
    return ttl_seconds / 3


def check_lease_timing(ttl_seconds: float, heartbeat_seconds: float) -> None:
    """A live holder must heartbeat at least twice per TTL, or one late beat gets it swept."""
    if heartbeat_seconds * 2 > ttl_seconds:
        raise ConfigError(
            f"{ENV_HEARTBEAT} ({heartbeat_seconds:g}s) must be at most half of {ENV_LOCK_TTL} "
            f"({ttl_seconds:g}s), or one late heartbeat gets a live worker swept"
        )


# libpq parameters whose values libpq only checks when it connects (`?sslmode=bogus` got as far
# as a connection attempt); checked here instead, so a bad one is refused before any SQL runs.
_LIBPQ_CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
    "load_balance_hosts": ("disable", "random"),
    "sslnegotiation": ("postgres", "direct"),
    "sslcertmode": ("disable", "allow", "require"),
}
_LIBPQ_INTEGERS = (
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)


def _check_libpq_parameters(url: str) -> None:
    """Refuse what libpq or psycopg would refuse: unknown parameters, bad values, bad syntax."""
    secret = unquote(urlsplit(url).password or "")

    def redact(message: str) -> str:
        message = " ".join(message.split())
        return message.replace(secret, "***") if secret else message

    try:
        params = conninfo_to_dict(url)
        timeout_from_conninfo(params)
    except ProgrammingError as exc:
        raise ConfigError(f"{ENV_DATABASE_URL} is not a valid connection URL: {redact(str(exc))}") from None
    for name, choices in _LIBPQ_CHOICES.items():
        value = params.get(name)
        if value is not None and str(value) not in choices:
            raise ConfigError(
                f"{ENV_DATABASE_URL}: {name} must be one of {', '.join(choices)}; got {value!r}"
            )
    for name in _LIBPQ_INTEGERS:
        value = params.get(name)
        if value is not None and not str(value).strip().lstrip("-").isdigit():
            raise ConfigError(f"{ENV_DATABASE_URL}: {name} must be an integer; got {value!r}")
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ConfigError(f"{ENV_DATABASE_URL}: port must be a number from 1 to 65535; got {port!r}")


def validate_database_url(url: str) -> str:
    """Reject a URL that psycopg would misread, with a message naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(
            f"{ENV_DATABASE_URL} must start with postgresql:// (got scheme {parts.scheme or 'none'!r})"
        )
    try:
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(f"{ENV_DATABASE_URL} has an invalid port: {exc}") from None
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise ConfigError(
            f"{ENV_DATABASE_URL} must name a database, e.g. postgresql://user@host:5432/invoices"
        )
    _check_libpq_parameters(url)
    return url


def _int(env: dict[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def _switch(env: dict[str, str], name: str, default: bool) -> bool:
    """A 0/1 setting; anything else is refused rather than guessed."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw not in ("0", "1"):
        raise ConfigError(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def pgdata_of(home: Path) -> Path:
    """The embedded server's data directory a home names (as root it lives elsewhere: db/embedded.py)."""
    return home / "pgdata"


class DatabasePlace(Protocol):
    """Where the project's database is: a server's URL, or the embedded server of a home
    (db/connection.py starts or attaches to it). `Settings` is one; so is the Dagster resource's
    configuration (InvoiceDatabase.store_settings)."""

    @property
    def database_url(self) -> str | None: ...

    @property
    def pgdata(self) -> Path | None: ...

    @property
    def pg_port(self) -> int: ...

    @property
    def pg_listen(self) -> str: ...

    @property
    def database_name(self) -> str: ...


class StoreSettings(DatabasePlace, Protocol):
    """What opening the store reads (engine.store.open_store): where the database is, and the
    lease TTL the store then owns."""

    @property
    def lock_ttl(self) -> timedelta: ...


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str | None
    pg_port: int
    pg_listen: str
    database_name: str
    lock_ttl: timedelta
    heartbeat_interval: timedelta
    max_attempts: int
    retry_base: timedelta
    max_document_bytes: int
    batch_size: int
    inbox: Path
    request_timeout: timedelta
    dagster_database_name: str | None
    dagster_home: Path
    celery_max_run: timedelta = timedelta(seconds=DEFAULT_CELERY_MAX_RUN_SECONDS)
    celery_broker_heartbeat: timedelta = timedelta(seconds=DEFAULT_CELERY_BROKER_HEARTBEAT_SECONDS)
    review_jobs: bool = True
    save_after: timedelta = timedelta(milliseconds=DEFAULT_SAVE_AFTER_MS)
    deployment: str = "local"
    review_users: Path | None = None
    review_proxy_header: str | None = None
    einvoice_checks: bool = True

    @property
    def uses_embedded_postgres(self) -> bool:
        return self.database_url is None

    @property
    def pgdata(self) -> Path:
        return pgdata_of(self.home)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        home = Path(env.get(ENV_HOME) or Path.cwd() / ".invoice_pipeline").absolute()
        url = env.get(ENV_DATABASE_URL) or None
        if url is not None:
            validate_database_url(url)
        ttl = _int(env, ENV_LOCK_TTL, DEFAULT_LOCK_TTL_SECONDS, minimum=1)
        heartbeat = (
            _int(env, ENV_HEARTBEAT, 0, minimum=1)
            if env.get(ENV_HEARTBEAT)
            else default_heartbeat_seconds(ttl)
        )
        check_lease_timing(ttl, heartbeat)
        return cls(
            home=home,
            database_url=url,
            pg_port=_int(env, ENV_PG_PORT, DEFAULT_PG_PORT, minimum=1),
            pg_listen=env.get(ENV_PG_LISTEN) or DEFAULT_PG_LISTEN,
            database_name=env.get(ENV_DATABASE_NAME) or DEFAULT_DATABASE_NAME,
            lock_ttl=timedelta(seconds=ttl),
            heartbeat_interval=timedelta(seconds=heartbeat),
            max_attempts=_int(env, ENV_MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS, minimum=1),
            retry_base=timedelta(seconds=_int(env, ENV_RETRY_BASE, DEFAULT_RETRY_BASE_SECONDS, minimum=0)),
            max_document_bytes=_int(env, ENV_MAX_DOCUMENT_BYTES, DEFAULT_MAX_DOCUMENT_BYTES, minimum=1),
            batch_size=_int(env, ENV_BATCH_SIZE, DEFAULT_BATCH_SIZE, minimum=1),
            inbox=Path(env.get(ENV_INBOX) or home / "inbox").absolute(),
            request_timeout=timedelta(
                seconds=_int(env, ENV_REQUEST_TIMEOUT, DEFAULT_REQUEST_TIMEOUT_SECONDS, minimum=1)
            ),
            dagster_database_name=env.get(ENV_DAGSTER_DATABASE_NAME) or None,
            dagster_home=Path(env.get(ENV_DAGSTER_HOME) or home / "dagster_home").absolute(),
            celery_max_run=timedelta(
                seconds=_int(env, ENV_CELERY_MAX_RUN, DEFAULT_CELERY_MAX_RUN_SECONDS, minimum=1)
            ),
            celery_broker_heartbeat=timedelta(
                seconds=_int(
                    env, ENV_CELERY_BROKER_HEARTBEAT, DEFAULT_CELERY_BROKER_HEARTBEAT_SECONDS, minimum=1
                )
            ),
            review_jobs=_switch(env, ENV_REVIEW_JOBS, True),
            save_after=timedelta(milliseconds=_int(env, ENV_SAVE_AFTER_MS, DEFAULT_SAVE_AFTER_MS, minimum=0)),
            deployment=env.get(ENV_DEPLOYMENT) or "local",
            review_users=Path(env[ENV_REVIEW_USERS]).absolute() if env.get(ENV_REVIEW_USERS) else None,
            review_proxy_header=env.get(ENV_REVIEW_PROXY_HEADER) or None,
            einvoice_checks=_switch(env, ENV_EINVOICE_CHECKS, True),
        )
