"""Fixtures shared by the integration tests (the Redis ones live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.helpers import running_worker
from tests.support.fake_openai import FakeOpenAI
from tests.support.pricing import write_priced_profile
from worker.process.jobs import WorkerProcess

if TYPE_CHECKING:
    from tests.support.mcp_server import McpServerProc


@pytest.fixture
async def worker(redis_url: str) -> AsyncIterator[WorkerProcess]:
    """One in-process worker on the test's Redis for the length of the test."""
    async with running_worker(redis_url) as wp:
        yield wp


@pytest.fixture
async def priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[FakeOpenAI, Path]]:
    """A FakeOpenAI with no replies yet and the priced profile ``gpt`` on it (tests/support/pricing.py)."""
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-test")
    fake = FakeOpenAI([])
    path = write_priced_profile(tmp_path / "profiles.json", fake.base_url)
    async with fake:
        yield fake, path


@pytest.fixture
def mcp_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[McpServerProc, str]]:
    """The test MCP server in its own process, and the profiles file of ``mcp``, which reaches it
    with the token it expects (tests/support/mcp_profiles.py)."""
    from tests.support.mcp_profiles import TOKEN, profiles_file
    from tests.support.mcp_server import mcp_server  # the mcp package: only for the tests that use it

    monkeypatch.setenv("MCP_TEST_TOKEN", TOKEN)
    with mcp_server(tmp_path) as srv:
        yield srv, profiles_file(srv.url, tmp_path / "profiles.json")
