"""Resolve the database the project uses: the external URL when configured, else the embedded server."""

from __future__ import annotations

from invoice_pipeline.config import ConfigError, DatabasePlace
from invoice_pipeline.db.embedded import EmbeddedPostgres
from invoice_pipeline.db.migrate import migrate


def embedded_server(settings: DatabasePlace) -> EmbeddedPostgres:
    """The home's server, as a handle: nothing is written until it is started or attached to."""
    if settings.pgdata is None:
        raise ConfigError("no database: neither a server's URL nor a home for the embedded server")
    return EmbeddedPostgres(settings.pgdata, settings.pg_port, settings.pg_listen)


def database_url(settings: DatabasePlace, *, start: bool = True) -> str:
    """The URL of the project's database; starts (or attaches to) the embedded server if needed."""
    if settings.database_url is not None:
        return settings.database_url
    server = embedded_server(settings)
    if start:
        server.start()
    else:
        server.use_password_file()
    return server.ensure_database(settings.database_name)


def prepare_database(settings: DatabasePlace) -> str:
    """Start or attach, create the database and apply pending migrations; return its URL."""
    url = database_url(settings)
    migrate(url)
    return url
