from __future__ import annotations

from collections.abc import Iterator

import pytest

from invoice_pipeline_tests.engine.mail.mailbox import private_dovecot
from pipeline_support.dovecot import Dovecot


@pytest.fixture
def imap() -> Iterator[Dovecot]:
    """A private Dovecot for the test, stopped after it."""
    yield from private_dovecot()
