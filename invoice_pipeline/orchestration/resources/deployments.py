"""The resources of each deployment, picked by name, as in Dagster's project_fully_featured
example: INVOICE_PIPELINE_DEPLOYMENT names the deployment, "local" (the default) or "production".

The environment is read once, when a code location loads (config.Settings: every variable
README and docs/configuration name, validated with messages naming the variable); the
resources are configured from it, the database URL as an `EnvVar` so Dagster keeps the
variable's name, never the URL and its password. Nothing reads the environment afterwards:
the sensor takes its inbox from its resource.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from invoice_pipeline.config import ENV_DATABASE_URL, ENV_DEPLOYMENT, ConfigError, Settings
from invoice_pipeline.orchestration.resources.document_reader import DocumentReader
from invoice_pipeline.orchestration.resources.invoice_database import InvoiceDatabase
from invoice_pipeline.orchestration.resources.review_access import ReviewAccess


def local_resources(settings: Settings) -> dict[str, object]:
    """Runs with no setup: the embedded PostgreSQL unless INVOICE_PIPELINE_DATABASE_URL names a server."""
    return {
        "invoice_db": InvoiceDatabase.from_settings(settings),
        "document_reader": DocumentReader(
            validate_einvoices=settings.einvoice_checks, compare_page_with_xml=settings.einvoice_checks
        ),
        "review_access": ReviewAccess.from_settings(settings),
    }


def production_resources(settings: Settings) -> dict[str, object]:
    """A database server of its own, always: a production code location that lost its URL
    refuses to load, rather than start an embedded PostgreSQL no other process shares."""
    if settings.uses_embedded_postgres:
        raise ConfigError(f"the production deployment needs {ENV_DATABASE_URL}")
    return local_resources(settings)


RESOURCES_BY_DEPLOYMENT: Mapping[str, Callable[[Settings], dict[str, object]]] = {
    "local": local_resources,
    "production": production_resources,
}


@dataclass(frozen=True)
class Deployment:
    """What a code location is built from: the settings read once (they also shape its
    definitions: the Launchpad review jobs, the celery runs' deadline) and the resources
    configured from them."""

    settings: Settings
    resources: dict[str, object]

    @property
    def name(self) -> str:
        return self.settings.deployment


def deployment(settings: Settings | None = None) -> Deployment:
    """The deployment `settings` (default: the environment's) name, with its resources."""
    settings = settings or Settings.from_env()
    build = RESOURCES_BY_DEPLOYMENT.get(settings.deployment)
    if build is None:
        raise ConfigError(
            f"{ENV_DEPLOYMENT} must be one of {', '.join(RESOURCES_BY_DEPLOYMENT)}; got {settings.deployment!r}"
        )
    return Deployment(settings, build(settings))
