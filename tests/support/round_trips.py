"""Round trips to Redis counted in a test: each packed write to a connection is one (a pipeline is
one write)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

__all__ = ["counted"]


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch, *, new_tasks_only: bool = False) -> Iterator[list[int]]:
    """[round trips] made meanwhile; ``new_tasks_only``: only those of the tasks started meanwhile
    (an API's requests), not those of the tasks already running (its background tasks, the test's)."""
    n = [0]
    real = AbstractConnection.send_packed_command
    before = asyncio.all_tasks() if new_tasks_only else set()

    async def send(self: Any, command: Any, check_health: bool = True) -> None:
        n[0] += asyncio.current_task() not in before
        await real(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", send)
    yield n
    monkeypatch.setattr(AbstractConnection, "send_packed_command", real)
