"""Fixtures shared by the integration tests (the Redis ones live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.helpers import running_worker
from worker.jobs import WorkerProcess


@pytest.fixture
async def worker(redis_url: str) -> AsyncIterator[WorkerProcess]:
    """One in-process worker on the test's Redis for the length of the test."""
    async with running_worker(redis_url) as wp:
        yield wp
