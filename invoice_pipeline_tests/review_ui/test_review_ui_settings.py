"""The review page's options fall back on its settings, read once (config.Settings), never on
the environment at the moment the page starts (issue 57)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from invoice_pipeline.cli.parser import build_parser
from invoice_pipeline.config import ENV_HOME, ENV_REVIEW_PROXY_HEADER, ENV_REVIEW_USERS, Settings
from invoice_pipeline.engine.reviewers import AuthError
from invoice_pipeline.review_ui.cli import auth_config


def test_the_proxy_header_and_the_users_file_come_from_the_settings_unless_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": {"orgs": ["acme"]}}))
    settings = Settings.from_env(
        {ENV_HOME: str(tmp_path), ENV_REVIEW_USERS: str(users), ENV_REVIEW_PROXY_HEADER: "X-Remote-User"}
    )
    # The environment at start-up is not asked: only the settings read before.
    monkeypatch.setenv(ENV_REVIEW_PROXY_HEADER, "X-Not-Read")
    auth = auth_config(build_parser().parse_args(["review-ui"]), settings)
    assert auth.proxy_header == "X-Remote-User" and auth.users_file == users
    given = auth_config(build_parser().parse_args(["review-ui", "--proxy-header", "X-Given"]), settings)
    assert given.proxy_header == "X-Given"


def test_a_proxy_header_setting_without_a_users_file_is_refused(tmp_path: Path) -> None:
    settings = Settings.from_env({ENV_HOME: str(tmp_path), ENV_REVIEW_PROXY_HEADER: "X-Remote-User"})
    with pytest.raises(AuthError, match="--proxy-header needs --users"):
        auth_config(build_parser().parse_args(["review-ui"]), settings)
