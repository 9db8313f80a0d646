"""SDK clients for test modules that start their server in a module-scoped ``url`` fixture."""

from __future__ import annotations

import pytest
from sdk_server import anthropic_client, openai_client


@pytest.fixture(scope="module")
def oai(url):
    """The ``openai`` SDK on the module's server."""
    return openai_client(url, timeout=600)


@pytest.fixture(scope="module")
def claude(url):
    """The ``anthropic`` SDK on the module's server."""
    return anthropic_client(url, timeout=600)
