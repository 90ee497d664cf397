"""The ``agentmill`` command. click for the command tree (arq already depends on it); rich for the
progress bars and readable event lines.

Commands talk to Redis directly (REDIS_URL), or with ``--api URL`` (or AGENTMILL_API_URL) go
through the HTTP API instead (app.cli.common.route). This module holds the group; the commands
about one run are in app.cli.one_run, batches and listings in app.cli.batches, schedules
in app.cli.schedules, the processes and the demo in app.cli.demo.
"""

from __future__ import annotations

import click

from agentmill_client._version import __version__
from app.cli import agents, archiver, batches, deletion, demo, keys, lineage, one_run, schedules, submit

__all__ = ["main"]


@click.group(help="agentmill: a durable worker pool for LLM agent runs on Redis + arq.")
@click.version_option(__version__, "--version", prog_name="agentmill", message="%(prog)s %(version)s")
def main() -> None:
    pass


for command in (
    demo.worker,
    demo.api,
    demo.demo,
    submit.submit,
    one_run.tail,
    one_run.status,
    one_run.abort,
    one_run.approve,
    one_run.reject,
    one_run.tool_result,
    batches.runs,
    batches.batch,
    schedules.schedule,
    agents.agents,
    lineage.retry,
    lineage.fork,
    archiver.archiver,
    keys.keys,
    keys.audit,
    deletion.sessions,
    deletion.deletions,
):
    main.add_command(command)
batches.batch.add_command(lineage.retry_batch)
batches.runs.add_command(deletion.run_delete)
