"""``agentmill archiver``: the archiver as its own process (AGENTMILL_ARCHIVE_URL; shared/archive/),
for deployments that would rather not run it in every worker (AGENTMILL_WORKER_ARCHIVER=false).
Killing it at any moment is safe: its claims expire and another archiver writes them again, once."""

from __future__ import annotations

from typing import Any

import click

from shared import logs, loop
from shared.preflight import check_archive_driver
from shared.settings import get_settings

__all__ = ["archiver"]


@click.command(help="Archive finished runs to PostgreSQL (AGENTMILL_ARCHIVE_URL) until stopped.")
def archiver() -> None:
    settings = get_settings()
    logs.configure(json_lines=settings.log_json, level=settings.log_level, process="archiver")
    if not settings.archive_url:
        raise click.UsageError("AGENTMILL_ARCHIVE_URL is not set: there is no archive to write to")
    check_archive_driver(settings)
    loop.run(_run())


async def _run() -> None:
    from shared.archive.archiver import Archiver
    from shared.archive.store import ArchiveStore
    from shared.partitions import Partitions
    from shared.scripts import Scripts

    settings = get_settings()
    assert settings.archive_url
    parts: Partitions[Any] = Partitions.from_settings(settings, retries=10)
    store = ArchiveStore(settings.archive_url)
    try:
        await parts.start()
        scripts = Scripts.for_settings(parts.client(parts.parts[0]), settings)
        await Archiver(parts, scripts, settings, store).run_forever()
    finally:
        await store.aclose()
        await parts.aclose()
