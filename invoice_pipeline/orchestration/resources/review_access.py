"""Who may act through the Launchpad review jobs (review_jobs.py), as the code location was
configured when it loaded: its deployment and the review page's users file, if any.

Dagster's open-source webserver has no login, so the name typed into a run's config is all a
job knows of the person: only a local (development) deployment's jobs act. There, with a users
file the name must be listed and acts only for that entry's orgs; without one, as its one local
user. Anything else is refused (`launchpad_actor`)."""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from invoice_pipeline.config import Settings

LOCAL_DEPLOYMENT = "local"


class ReviewAccess(ConfigurableResource):
    deployment: str = Field(
        default="", description="the code location's deployment; unknown (empty) refuses every review run"
    )
    users_file: str = Field(default="", description="the review page's users file; empty: none")

    @classmethod
    def from_settings(cls, settings: Settings) -> ReviewAccess:
        users = str(settings.review_users) if settings.review_users is not None else ""
        return cls(deployment=settings.deployment, users_file=users)
